// device_bf16_normal_bits (harness/device_normals.hpp): one thread per value, by the code the host's
// bf16_normal runs (harness/philox.hpp's Philox, harness/normal_bf16_series.hpp's Box-Muller and
// rounding test), log from libdevice (within 1 ulp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "harness/device_normals.hpp"
#include "harness/normal_bf16_series.hpp"

namespace dsa {
namespace {

__global__ void bf16_normal_bits(philox::Stream s, double stddev, int64_t first, int64_t n, uint16_t* out) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
    const double y = philox::series::normal_times(s.block(uint64_t(first + j)), stddev);
    out[j] = philox::series::rounds_as_libm(y, stddev)
                 ? philox::series::bf16_bits_of_normal(philox::series::bits_of_double(y))
                 : kLibmDecides;
  }
}

bool failed(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return false;
  static std::once_flag said;
  std::call_once(said, [&] {
    std::fprintf(stderr, "generate: drawing on the host from now on (%s: %s)\n", what, cudaGetErrorString(e));
  });
  allow_device_generation(false);
  return true;
}

bool device_present() {
  static const bool present = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  }();
  return present;
}

}  // namespace

bool device_bf16_normal_bits(const philox::Stream& s, double stddev, uint16_t* bits, int64_t n) {
  if (n <= 0 || !device_generation_allowed() || !device_present()) return false;
  constexpr int64_t kChunk = int64_t(1) << 25;  // 64 MiB of bits on the device at a time
  const cudaStream_t st = cudaStreamPerThread;
  uint16_t* d = nullptr;
  if (failed(cudaMallocAsync(reinterpret_cast<void**>(&d), std::min(n, kChunk) * sizeof(uint16_t), st), "cudaMallocAsync"))
    return false;
  bool ok = true;
  for (int64_t first = 0; ok && first < n; first += kChunk) {
    const int64_t len = std::min(kChunk, n - first);
    bf16_normal_bits<<<1024, 256, 0, st>>>(s, stddev, first, len, d);
    ok = !failed(cudaGetLastError(), "bf16_normal_bits") &&
         !failed(cudaMemcpyAsync(bits + first, d, len * sizeof(uint16_t), cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync") &&
         !failed(cudaStreamSynchronize(st), "cudaStreamSynchronize");
  }
  cudaFreeAsync(d, st);
  return ok;
}

}  // namespace dsa
