#include "check/gpu/host_transfer.hpp"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "check/gpu/cuda_util.hpp"

namespace dsa::gpu {
namespace {

constexpr size_t kChunkBytes = size_t(64) << 20;

// Two pinned buffers, one stream, one event per buffer. Process-wide and never freed (pinned
// allocation is slow; freeing at exit can race the CUDA runtime's own teardown). The mutex makes
// concurrent oracle runs take turns.
struct Staging {
  void* buf[2] = {nullptr, nullptr};
  cudaStream_t stream = nullptr;
  cudaEvent_t done[2] = {nullptr, nullptr};
  std::mutex mu;

  static Staging& get() {
    static Staging* s = [] {
      auto* st = new Staging;
      for (int k = 0; k < 2; ++k) {
        DSA_GPU_CUDA(cudaMallocHost(&st->buf[k], kChunkBytes));
        DSA_GPU_CUDA(cudaEventCreateWithFlags(&st->done[k], cudaEventDisableTiming));
      }
      DSA_GPU_CUDA(cudaStreamCreate(&st->stream));  // a blocking stream: ordered after stream 0's work
      return st;
    }();
    return *s;
  }
};

// dst[i] = D(src[i]) on several threads, each a contiguous slice.
template <class S, class D>
void convert(const S* src, D* dst, size_t n) {
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  const size_t per = (n + threads - 1) / threads;
  if (n < (size_t(1) << 18) || threads == 1) {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<D>(src[i]);
    return;
  }
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    const size_t b = t * per, e = std::min(n, b + per);
    if (b >= e) break;
    pool.emplace_back([=] {
      for (size_t i = b; i < e; ++i) dst[i] = static_cast<D>(src[i]);
    });
  }
  for (auto& th : pool) th.join();
}

}  // namespace

template <class R>
void to_host(const R* dev, double* host, size_t n) {
  if (n == 0) return;
  Staging& s = Staging::get();
  std::lock_guard<std::mutex> lock(s.mu);
  const size_t chunk = kChunkBytes / sizeof(R);
  const size_t chunks = (n + chunk - 1) / chunk;
  for (size_t i = 0; i <= chunks; ++i) {
    if (i < chunks) {  // start chunk i's DMA ...
      const size_t off = i * chunk, len = std::min(chunk, n - off);
      DSA_GPU_CUDA(cudaMemcpyAsync(s.buf[i % 2], dev + off, len * sizeof(R), cudaMemcpyDeviceToHost, s.stream));
      DSA_GPU_CUDA(cudaEventRecord(s.done[i % 2], s.stream));
    }
    if (i > 0) {  // ... while chunk i−1 is copied out of its buffer
      const size_t j = i - 1, off = j * chunk, len = std::min(chunk, n - off);
      DSA_GPU_CUDA(cudaEventSynchronize(s.done[j % 2]));
      convert(static_cast<const R*>(s.buf[j % 2]), host + off, len);
    }
  }
}

template <class R>
void to_device(const double* host, R* dev, size_t n) {
  if (n == 0) return;
  Staging& s = Staging::get();
  std::lock_guard<std::mutex> lock(s.mu);
  const size_t chunk = kChunkBytes / sizeof(R);
  const size_t chunks = (n + chunk - 1) / chunk;
  for (size_t i = 0; i < chunks; ++i) {
    const size_t off = i * chunk, len = std::min(chunk, n - off);
    if (i >= 2) DSA_GPU_CUDA(cudaEventSynchronize(s.done[i % 2]));  // the buffer's previous DMA is done
    convert(host + off, static_cast<R*>(s.buf[i % 2]), len);
    DSA_GPU_CUDA(cudaMemcpyAsync(dev + off, s.buf[i % 2], len * sizeof(R), cudaMemcpyHostToDevice, s.stream));
    DSA_GPU_CUDA(cudaEventRecord(s.done[i % 2], s.stream));
  }
  DSA_GPU_CUDA(cudaStreamSynchronize(s.stream));
}

template void to_host<float>(const float*, double*, size_t);
template void to_host<double>(const double*, double*, size_t);
template void to_device<float>(const double*, float*, size_t);
template void to_device<double>(const double*, double*, size_t);

}  // namespace dsa::gpu
