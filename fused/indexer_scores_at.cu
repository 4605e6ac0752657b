// The indexer scores of given slots (SPEC.md §3), for key sets the indexer did not select itself:
// a benchmark's fixed index pattern, tests. The training pipeline never needs it (the indexer
// hands its top-k scores on, IndexerArgs::topk_scores). Plain fp32 FMAs from bf16, no tensor
// cores: one warp per slot, a lane per head, the head sum by shuffles.
#include <cstdint>

#include "fused/api.cuh"
#include "fused/cuda_check.hpp"
#include "core/errors.hpp"

namespace dsa::fused {
namespace {

constexpr int kThreads = 256;

__global__ void indexer_scores_at_kernel(const SlotScoresArgs a) {
  const int g = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bf16* q = a.q_I + size_t(g) * a.HI * a.DI;
  for (int j = warp; j < a.K; j += kThreads / 32) {
    const int t = a.indices[size_t(g) * a.K + j];
    float I = -__builtin_huge_valf();
    if (t >= 0 && t < a.Tp) {  // warp-uniform
      const bf16* k = a.k_I + size_t(t) * a.DI;
      float v = 0.f;
      for (int h = lane; h < a.HI; h += 32) {
        float u = 0.f;
        for (int d = 0; d < a.DI; ++d) u = fmaf(__bfloat162float(q[size_t(h) * a.DI + d]), __bfloat162float(k[d]), u);
        v += __bfloat162float(a.w[size_t(g) * a.HI + h]) * (a.relu ? fmaxf(u, 0.f) : u);
      }
      for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      I = v;
    }
    if (lane == 0) a.scores[size_t(g) * a.K + j] = I;
  }
}

}  // namespace

void indexer_scores_at(const SlotScoresArgs& a, cudaStream_t s) {
  require(a.HI >= 1 && a.DI >= 1, "HI", "HI and DI at least 1");
  if (a.Tq <= 0 || a.K <= 0) return;
  indexer_scores_at_kernel<<<a.Tq, kThreads, 0, s>>>(a);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::fused
