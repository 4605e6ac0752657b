// device_bf16_normal_bits (harness/device_normals.hpp): one thread per value, Philox4x32-10 as
// harness/philox.hpp computes it (the tests compare the two bit for bit), log from libdevice (within
// 1 ulp), cos from the series both sides share.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "harness/device_normals.hpp"
#include "harness/normal_bf16_series.hpp"

namespace dsa {
namespace {

__device__ inline void philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k0 += kW0, k1 += kW1;
    const uint64_t p0 = uint64_t{kM0} * c[0], p1 = uint64_t{kM1} * c[2];
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c[1] ^ k0, n2 = uint32_t(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0, c[1] = uint32_t(p1), c[2] = n2, c[3] = uint32_t(p0);
  }
}

// philox::Stream::unit: a 53-bit uniform in (0, 1].
__device__ inline double unit(uint32_t hi, uint32_t lo) {
  const uint64_t m = (uint64_t{hi} << 21) ^ (lo >> 11);
  return (double(m & ((uint64_t{1} << 53) - 1)) + 1.0) * (1.0 / 9007199254740992.0);
}

__global__ void bf16_normal_bits(uint32_t k0, uint32_t k1, uint64_t name, double stddev, int64_t first, int64_t n,
                                 uint16_t* out) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t i = uint64_t(first + j);
    uint32_t c[4] = {uint32_t(i), uint32_t(i >> 32), uint32_t(name), uint32_t(name >> 32)};
    philox4x32_10(c, k0, k1);
    const double u1 = unit(c[0], c[1]), u2 = unit(c[2], c[3]);
    const double y = sqrt(-2.0 * log(u1)) * philox::series::cos_0_2pi(6.283185307179586 * u2) * stddev;
    const uint64_t bits = uint64_t(__double_as_longlong(y));
    out[j] = philox::series::bf16_rounding_is_safe(bits, 1e-12 * (fabs(stddev) + fabs(y)))
                 ? philox::series::bf16_bits_of_normal(bits)
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
    bf16_normal_bits<<<1024, 256, 0, st>>>(s.key[0], s.key[1], s.name, stddev, first, len, d);
    ok = !failed(cudaGetLastError(), "bf16_normal_bits") &&
         !failed(cudaMemcpyAsync(bits + first, d, len * sizeof(uint16_t), cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync") &&
         !failed(cudaStreamSynchronize(st), "cudaStreamSynchronize");
  }
  cudaFreeAsync(d, st);
  return ok;
}

}  // namespace dsa
