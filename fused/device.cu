// Device discovery and the bf16 helpers every kernel shares.
#include <cuda_runtime.h>

#include "fused/device.hpp"
#include "fused/cuda_check.hpp"

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

std::string device_pci_bus_id(int device) {
  char id[32] = {0};
  if (cudaDeviceGetPCIBusId(id, sizeof id, device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return id;
}

std::string device_arch(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
}

namespace {
std::string version_text(int v) { return v > 0 ? std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) : ""; }
}  // namespace

std::string driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) cudaGetLastError(), v = 0;
  return version_text(v);
}

std::string runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) cudaGetLastError(), v = 0;
  return version_text(v);
}

bool sm90a_kernel_fits(const void* kernel, int smem_bytes) {
  int dev = 0, major = 0, minor = 0, max_smem = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (major != 9 || minor != 0 || max_smem < smem_bytes) return false;
  cudaFuncAttributes fa{};
  DSA_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
  return fa.binaryVersion == 90;
}

bool sm90a_latent_width(int C, int R) { return C == 512 && R % 8 == 0 && C + R <= 576; }

std::invalid_argument sm90a_kernel_refused(const std::string& who, int C, int R) {
  return std::invalid_argument(who + ": the wgmma kernel needs an sm_90 device, sm_90a code, C = 512 and C + R ≤ 576 "
                               "with R a multiple of 8 (got C = " + std::to_string(C) + ", R = " + std::to_string(R) + ")");
}

}  // namespace dsa::fused
