#include <algorithm>
#include <cstdint>
#include <mutex>

#include "check/gpu/cuda_util.hpp"

namespace dsa::gpu {
namespace {

constexpr int kMaxDevices = 64;

// What the pool keeps cached between runs: enough for every nightly-sized case, small beside the
// device. The fused backend allocates from the same pool and may ask it to keep more
// (fused/rank_context.hpp); neither side lowers what the other asked for.
uint64_t pool_keep_bytes(int device) {
  size_t free_b = 0, total_b = 0;
  int prev = 0;
  DSA_GPU_CUDA(cudaGetDevice(&prev));
  if (prev != device) DSA_GPU_CUDA(cudaSetDevice(device));
  DSA_GPU_CUDA(cudaMemGetInfo(&free_b, &total_b));
  if (prev != device) DSA_GPU_CUDA(cudaSetDevice(prev));
  return std::min<uint64_t>(total_b / 16, uint64_t{4} << 30);
}

// The default pool of the current device, its release threshold set on first use.
void configure_pool() {
  static std::mutex mu;
  static bool configured[kMaxDevices] = {};
  int device = 0;
  DSA_GPU_CUDA(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) return;
  std::lock_guard<std::mutex> lock(mu);
  if (configured[device]) return;
  cudaMemPool_t pool = nullptr;
  DSA_GPU_CUDA(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t now = 0;
  DSA_GPU_CUDA(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &now));
  uint64_t keep = std::max(now, pool_keep_bytes(device));
  if (keep != now) DSA_GPU_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  configured[device] = true;
}

}  // namespace

void* pool_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  configure_pool();
  void* p = nullptr;
  DSA_GPU_CUDA(cudaMallocAsync(&p, bytes, cudaStreamPerThread));
  return p;
}

// Never throws: destructors call it.
void pool_free(void* p) {
  if (p) cudaFreeAsync(p, cudaStreamPerThread);
}

}  // namespace dsa::gpu
