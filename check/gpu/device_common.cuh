// Device helpers shared by the oracle's kernels: the bf16 rounding of the policy, block
// reductions and grid sizes. Nothing here comes from fused/.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

#include "check/gpu/cuda_util.hpp"

namespace dsa::gpu {

// bf(): the rounding points of SPEC.md §8. fp64 is the exact policy, where bf() is the identity;
// fp32 rounds to the nearest bf16, ties to even, NaN stays NaN (a quiet NaN), ±inf stay ±inf and
// finite values past the largest bf16 round to ±inf, as a hardware conversion does.
__device__ __forceinline__ double bf(double x) { return x; }
__device__ __forceinline__ float bf(float x) {
  if (isnan(x)) return x;
  uint32_t u = __float_as_uint(x);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return __uint_as_float(u & 0xFFFF0000u);
}

template <class R> __device__ __forceinline__ R neg_inf();
template <> __device__ __forceinline__ double neg_inf<double>() { return -__longlong_as_double(0x7FF0000000000000ll); }
template <> __device__ __forceinline__ float neg_inf<float>() { return -__int_as_float(0x7F800000); }

__device__ __forceinline__ double exp_(double x) { return exp(x); }
__device__ __forceinline__ float exp_(float x) { return expf(x); }
__device__ __forceinline__ double log_(double x) { return log(x); }
__device__ __forceinline__ float log_(float x) { return logf(x); }

constexpr int kBlock = 256;  // threads of every block-per-row kernel

// Sum / max over the block (blockDim.x == kBlock); every thread gets the result.
template <class R>
__device__ R block_sum(R v) {
  __shared__ R part[kBlock / 32];
  __syncthreads();  // the buffer may still be read by a previous call
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  R s = 0;
  for (int i = 0; i < kBlock / 32; ++i) s += part[i];
  return s;
}
template <class R>
__device__ R block_max(R v) {
  __shared__ R part[kBlock / 32];
  __syncthreads();
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  R m = part[0];
  for (int i = 1; i < kBlock / 32; ++i) m = max(m, part[i]);
  return m;
}

// Blocks for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n) {
  const int64_t b = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

#define DSA_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

}  // namespace dsa::gpu
