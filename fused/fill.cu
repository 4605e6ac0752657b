#include <cuda_bf16.h>

#include "fused/cuda_check.hpp"
#include "fused/fill.hpp"

namespace dsa::fused {

namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

__global__ void fill_kernel(__nv_bfloat16* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + (uint64_t)i);
    const float u = (float)(h >> 40) * (1.f / 16777216.f);  // [0, 1)
    p[i] = __float2bfloat16((2.f * u - 1.f) * scale);
  }
}

}  // namespace

void fill_uniform_bf16(void* p, int64_t n, uint64_t seed, float scale, cudaStream_t s) {
  if (n <= 0) return;
  fill_kernel<<<4096, 256, 0, s>>>(static_cast<__nv_bfloat16*>(p), n, seed, scale);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::fused
