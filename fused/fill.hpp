// Deterministic pseudo-random device data for benchmarks (no host round trip for GB-sized inputs).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace dsa::fused {

// p[i] = bf16 of a hash-uniform value in [−scale, scale), a pure function of (seed, i).
void fill_uniform_bf16(void* p, int64_t n, uint64_t seed, float scale, cudaStream_t s);

}  // namespace dsa::fused
