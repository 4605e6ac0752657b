#include "fused/cuda_check.hpp"
#include "fused/rows.hpp"

namespace dsa::fused {

namespace {

template <class T>
__global__ void gather_rows_kernel(T* dst, const T* src, const int32_t* map, int64_t rows, int64_t w) {
  const int64_t n = rows * w;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / w, e = i - r * w;
    dst[i] = src[(int64_t)map[r] * w + e];
  }
}

}  // namespace

void gather_rows(void* dst, const void* src, const int32_t* map, int64_t rows, int64_t row_bytes, cudaStream_t s) {
  if (rows <= 0 || row_bytes <= 0) return;
  const int64_t n = rows * row_bytes;
  const int blocks = (int)std::min<int64_t>((n / 4 + 255) / 256 + 1, 8192);
  if (row_bytes % 4 == 0)
    gather_rows_kernel<<<blocks, 256, 0, s>>>(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), map,
                                              rows, row_bytes / 4);
  else
    gather_rows_kernel<<<blocks, 256, 0, s>>>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), map,
                                              rows, row_bytes / 2);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::fused
