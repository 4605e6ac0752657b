// The fused kernels' benchmarks by name: bench_fused.cpp registers them (CUDA builds only) and
// cmd_bench.cpp must know them in every build (a filter that selects one needs a device), so the
// list lives here once. Names are BM_Fused<Kernel>/model:M/S:S/iterations:N/manual_time.
#pragma once

namespace dsa::fused_bench {

struct Kernel {
  const char* name;
  const char* kernel;  // bench_fused.cpp's run_kernel switch
};
inline constexpr Kernel kKernels[] = {
    {"BM_FusedIndexerTopk", "indexer"},
    // The portable mma.sync indexer on the same shapes, for comparison with the wgmma one.
    {"BM_FusedIndexerTopkMma", "indexer_mma"},
    // The two-phase indexer (scores of a block of rows into a workspace, then a top-k kernel over
    // them) forced, for comparison (sm_90 only).
    {"BM_FusedIndexerTopkTwoPhase", "indexer_two_phase"},
    {"BM_FusedAttentionForward", "forward"},
    // The portable mma.sync forward on the same shapes, for comparison with the wgmma one.
    {"BM_FusedAttentionForwardMma", "forward_mma"},
    {"BM_FusedAttentionBackward", "backward"},
    // The portable mma.sync backward on the same shapes, for comparison with the wgmma one.
    {"BM_FusedAttentionBackwardMma", "backward_mma"},
    {"BM_FusedLossForwardBackward", "loss"},
    // fused/run.cpp's sparse loss: the backward emits T^, the loss reads it.
    // Their loss share = (BackwardWithTarget − Backward + LossGivenTarget) / (Forward + Backward).
    {"BM_FusedAttentionBackwardWithTarget", "backward_target"},
    {"BM_FusedLossGivenTarget", "loss_given_target"}};
inline constexpr int kSeqLens[] = {4096, 16384, 65536, 131072};
// The backward with hot keys (same pairs and FLOP formula, every row's dK~ atomics on the same keys).
inline constexpr const char* kHotKeys = "BM_FusedAttentionBackwardHotKeys";
inline constexpr int kHotSeqLens[] = {4096, 16384};
// The four stages against the CPU reference's whole core, at S = 4096 only.
inline constexpr const char* kCoreVsCpu = "BM_FusedCoreVsCpuReference";
inline constexpr int kCoreVsCpuSeqLen = 4096;

}  // namespace dsa::fused_bench
