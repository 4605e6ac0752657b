#include "fused/rank_context.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "fused/cuda_check.hpp"

namespace dsa::fused {

namespace {

std::atomic<int64_t> g_contexts_created{0};

struct ContextCache {
  std::mutex m;
  std::map<int, std::vector<std::unique_ptr<RankContext>>> idle;  // by device
};

// Never destroyed: contexts outlive static destruction, when the CUDA runtime may be gone.
ContextCache& context_cache() {
  static auto* c = new ContextCache;
  return *c;
}

}  // namespace

RankContext::RankContext(int device) : device_(device) {
  DSA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS) {
    cudaStreamDestroy(stream_);
    throw std::runtime_error("cublasCreate failed");
  }
  if (cublasSetStream(blas_, stream_) != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
    throw std::runtime_error("cublasSetStream failed");
  }
  keep_pool_memory(device);
  ++g_contexts_created;
}

RankContext::~RankContext() {
  if (blas_) cublasDestroy(blas_);
  if (stream_) cudaStreamDestroy(stream_);
}

RankContextLease::RankContextLease(int device) : uncaught_(std::uncaught_exceptions()) {
  {
    ContextCache& c = context_cache();
    std::lock_guard<std::mutex> lock(c.m);
    auto& idle = c.idle[device];
    if (!idle.empty()) {
      ctx_ = std::move(idle.back());
      idle.pop_back();
    }
  }
  if (!ctx_) ctx_ = std::make_unique<RankContext>(device);
}

RankContextLease::~RankContextLease() {
  if (!ctx_ || std::uncaught_exceptions() > uncaught_) return;  // a failed rank's context goes with it
  ContextCache& c = context_cache();
  std::lock_guard<std::mutex> lock(c.m);
  c.idle[ctx_->device()].push_back(std::move(ctx_));
}

int64_t rank_contexts_created() { return g_contexts_created.load(); }

uint64_t pool_keep_bytes(int device) {
  size_t free_b = 0, total_b = 0;
  int prev = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != device) DSA_CUDA_CHECK(cudaSetDevice(device));
  const cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
  if (prev != device) cudaSetDevice(prev);
  DSA_CUDA_CHECK(e);
  return std::min<uint64_t>(total_b / 16, uint64_t{8} << 30);
}

void keep_pool_memory(int device) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  cudaMemPool_t pool = nullptr;
  DSA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t now = 0;
  DSA_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &now));
  uint64_t keep = std::max(now, pool_keep_bytes(device));
  if (keep != now) DSA_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
}

}  // namespace dsa::fused
