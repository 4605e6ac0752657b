// Several CP ranks on one GPU: each rank is a host thread with its own stream; a collective
// publishes the rank's buffers, meets the others at a host barrier, and moves data with
// device-to-device copies (reductions with one small kernel, in rank order: deterministic).
#include <stdexcept>
#include <string>
#include <vector>

#include "fused/comm/comm.hpp"
#include "fused/comm/host_barrier.hpp"
#include "fused/cuda_check.hpp"
#include "core/trace.hpp"

namespace dsa::fused {

namespace {

constexpr int kMaxSources = 16;
struct Sources {
  const float* p[kMaxSources];
  int n;
};

// out[i] (+)= Σ_j src[j][i], sources added in order so the sum is the same on every run.
__global__ void sum_sources(float* out, Sources src, size_t count, bool accumulate) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    float s = accumulate ? out[i] : 0.f;
    for (int j = 0; j < src.n; ++j) s += src.p[j][i];
    out[i] = s;
  }
}

void sum_into(float* out, const std::vector<const float*>& src, size_t count, cudaStream_t s) {
  if (count == 0) return;
  const int blocks = (int)std::min<size_t>((count + 255) / 256, 4096);
  for (size_t b = 0; b < src.size(); b += kMaxSources) {
    Sources S{};
    S.n = (int)std::min<size_t>(kMaxSources, src.size() - b);
    for (int j = 0; j < S.n; ++j) S.p[j] = src[b + j];
    sum_sources<<<blocks, 256, 0, s>>>(out, S, count, b > 0);
    DSA_CUDA_CHECK(cudaGetLastError());
  }
}

class LocalGroup;

class LocalMember final : public DeviceComm {
 public:
  LocalMember(LocalGroup& g, int rank) : g_(g), rank_(rank) {}
  ~LocalMember() override {
    if (tmp_) cudaFree(tmp_);
  }
  int rank() const override { return rank_; }
  int size() const override;
  int device() const override;
  std::string kind() const override { return "local"; }
  void allgather(const void* send, void* recv, size_t bytes, cudaStream_t s) override;
  void reduce_scatter(const float* send, float* recv, size_t count, cudaStream_t s) override;
  void allreduce_sum(float* buf, size_t count, cudaStream_t s) override;
  void abort() override;

 private:
  void publish(const void* p, cudaStream_t s);
  LocalGroup& g_;
  int rank_;
  float* tmp_ = nullptr;
  size_t tmp_count_ = 0;
};

class LocalGroup final : public CommGroup {
 public:
  LocalGroup(int size, int device) : device_(device), barrier_(size), ptr_(size) {
    for (int r = 0; r < size; ++r) members_.emplace_back(new LocalMember(*this, r));
  }
  int size() const override { return (int)members_.size(); }
  DeviceComm& comm(int rank) override { return *members_.at(rank); }

  int device_;
  HostBarrier barrier_;
  std::vector<const void*> ptr_;
  std::vector<std::unique_ptr<LocalMember>> members_;
};

int LocalMember::size() const { return g_.size(); }
int LocalMember::device() const { return g_.device_; }
void LocalMember::abort() { g_.barrier_.abort(); }

// The buffer must be complete before another rank's stream reads it.
void LocalMember::publish(const void* p, cudaStream_t s) {
  DSA_CUDA_CHECK(cudaStreamSynchronize(s));
  g_.ptr_[rank_] = p;
  g_.barrier_.arrive_and_wait();
}

void LocalMember::allgather(const void* send, void* recv, size_t bytes, cudaStream_t s) {
  const TraceSpan span("fused: local all-gather");
  publish(send, s);
  for (int r = 0; r < size(); ++r)
    if (bytes)
      DSA_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(recv) + r * bytes, g_.ptr_[r], bytes,
                                     cudaMemcpyDeviceToDevice, s));
  DSA_CUDA_CHECK(cudaStreamSynchronize(s));
  g_.barrier_.arrive_and_wait();  // nobody reads my send buffer any more
}

void LocalMember::reduce_scatter(const float* send, float* recv, size_t count, cudaStream_t s) {
  const TraceSpan span("fused: local reduce-scatter");
  publish(send, s);
  std::vector<const float*> src;
  for (int r = 0; r < size(); ++r) src.push_back(static_cast<const float*>(g_.ptr_[r]) + rank_ * count);
  sum_into(recv, src, count, s);
  DSA_CUDA_CHECK(cudaStreamSynchronize(s));
  g_.barrier_.arrive_and_wait();
}

void LocalMember::allreduce_sum(float* buf, size_t count, cudaStream_t s) {
  const TraceSpan span("fused: local all-reduce");
  if (tmp_count_ < count) {
    if (tmp_) DSA_CUDA_CHECK(cudaFree(tmp_));
    DSA_CUDA_CHECK(cudaMalloc(&tmp_, count * sizeof(float)));
    tmp_count_ = count;
  }
  publish(buf, s);
  std::vector<const float*> src;
  for (int r = 0; r < size(); ++r) src.push_back(static_cast<const float*>(g_.ptr_[r]));
  sum_into(tmp_, src, count, s);
  DSA_CUDA_CHECK(cudaStreamSynchronize(s));
  g_.barrier_.arrive_and_wait();  // every rank has read every buffer: now overwrite mine
  if (count) DSA_CUDA_CHECK(cudaMemcpyAsync(buf, tmp_, count * sizeof(float), cudaMemcpyDeviceToDevice, s));
}

}  // namespace

std::unique_ptr<CommGroup> make_local_group(int size, int device) {
  if (size < 1) throw std::invalid_argument("local communicator: size must be >= 1");
  return std::make_unique<LocalGroup>(size, device);
}

}  // namespace dsa::fused
