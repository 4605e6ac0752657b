// Row movement on the device: the all-gather restore (gathered rank order → global order) and its
// inverse before the reduce-scatter. Host-callable.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace dsa::fused {

// dst[i, :] = src[map[i], :] for i < rows; a row is row_bytes bytes (a multiple of 2).
void gather_rows(void* dst, const void* src, const int32_t* map, int64_t rows, int64_t row_bytes, cudaStream_t s);

}  // namespace dsa::fused
