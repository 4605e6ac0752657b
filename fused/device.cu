// Device discovery and the bf16 helpers every kernel shares.
#include <cuda_runtime.h>

#include "fused/device.hpp"

namespace dsa::fused {

int device_count() {
  int n = 0;
  // No driver or no device both mean "no GPU here": report 0, never fail.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "unknown";
  return prop.name;
}

}  // namespace dsa::fused
