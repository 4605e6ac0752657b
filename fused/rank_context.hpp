// What a CP rank of run_fused needs besides its buffers, kept across cases (issue: a nightly runs
// thousands of cases, and each one used to create a stream and a cuBLAS handle per rank and
// cudaMalloc/cudaFree some forty buffers, every cudaFree a device-wide synchronization).
//
// A RankContext is a non-blocking stream and a cuBLAS handle bound to it, on one device. A run
// takes one per rank (RankContextLease) and gives it back when the rank finished cleanly; a rank
// that threw destroys its context, as an aborted NCCL group is never reused. The rank's device
// buffers come from the device's default stream-ordered pool (cudaMallocAsync on the context's
// stream), which keeps up to pool_keep_bytes() cached between cases.
#pragma once

#include <cstdint>
#include <memory>

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace dsa::fused {

class RankContext {
 public:
  explicit RankContext(int device);
  ~RankContext();
  RankContext(const RankContext&) = delete;
  RankContext& operator=(const RankContext&) = delete;
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t blas() const { return blas_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
};

// A context of `device` for the lifetime of the lease: an idle cached one, else a new one. The
// caller must have made `device` current (cudaSetDevice).
class RankContextLease {
 public:
  explicit RankContextLease(int device);
  ~RankContextLease();  // back to the cache, unless an exception is unwinding through the rank
  RankContextLease(const RankContextLease&) = delete;
  RankContextLease& operator=(const RankContextLease&) = delete;
  RankContext& operator*() const { return *ctx_; }
  RankContext* operator->() const { return ctx_.get(); }

 private:
  std::unique_ptr<RankContext> ctx_;
  int uncaught_ = 0;
};

// How many contexts this process has created: tests (a second case of the same cp creates none).
int64_t rank_contexts_created();

// Sets the release threshold of `device`'s default memory pool to at least pool_keep_bytes(device)
// (never lowers what another user of the pool asked for). Idempotent; device current.
void keep_pool_memory(int device);
// min(1/16 of the device's memory, 8 GiB): a production-shape case's buffers stay cached, and what
// is cached is still small beside what a long-context test needs.
uint64_t pool_keep_bytes(int device);

}  // namespace dsa::fused
