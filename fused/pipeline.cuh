// Hopper (sm_90a) producer/consumer plumbing of a warp-specialized kernel: shared-memory
// mbarriers (a producer's cp.async completions arrive on them; consumers wait on a phase parity),
// named barriers between warpgroups, and the warpgroup register reallocation. Device code of the
// sm_90a pass only (__CUDA_ARCH_FEAT_SM90_ALL), like wgmma.cuh.
#pragma once

#include <cstdint>

#include "fused/mma.cuh"

namespace dsa::fused::pipeline {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mma::smem_addr(bar)), "r"(count));
}
// Blocks until the phase of parity `parity` has completed (a fresh barrier counts its phase
// before the first as completed: waiting on parity 1 passes at once).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(mma::smem_addr(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(mma::smem_addr(bar))
               : "memory");
}
// One arrival on `bar` once every cp.async this thread issued before has landed (.noinc: the
// barrier's count already includes it).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(mma::smem_addr(bar)) : "memory");
}
// 16 bytes global → shared, or 16 zero bytes when !valid (nothing is read then).
__device__ __forceinline__ void cp_async16_or_zero(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(mma::smem_addr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}

// Named barriers 1..15 (0 is __syncthreads) over `threads` threads of the CTA.
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The registers per thread of the calling warpgroup (a multiple of 8 in [24, 256]).
template <int N>
__device__ __forceinline__ void regs_grow() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void regs_shrink() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace dsa::fused::pipeline
