#include "check/gpu/host_transfer.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "check/gpu/cuda_util.hpp"
#include "check/gpu/kernels.hpp"

namespace dsa::gpu {
namespace {

constexpr size_t kChunkBytes = size_t(64) << 20;

// Two pinned buffers, one event per buffer. Kept for the process's life and never freed (pinned
// allocation is slow; freeing at exit can race the CUDA runtime's own teardown). The copies go on
// the calling thread's default stream (this library uses per-thread default streams), so they are
// ordered with that thread's kernels and allocations.
struct Staging {
  void* buf[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};

  Staging() {
    for (int k = 0; k < 2; ++k) {
      DSA_GPU_CUDA(cudaMallocHost(&buf[k], kChunkBytes));
      DSA_GPU_CUDA(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
    }
  }
};

// One Staging per transfer in flight, so the exact run, the bf16 run and the backend's outputs
// going up beside them (check/gpu/oracle_gpu.cpp) copy at once; at most kMaxStagings (128 MiB of
// pinned memory each), beyond which a transfer waits for one to come back.
constexpr size_t kMaxStagings = 4;

class StagingLease {
 public:
  StagingLease() {
    std::unique_lock<std::mutex> lock(mu());
    ready().wait(lock, [] { return !idle().empty() || made() < kMaxStagings; });
    if (idle().empty()) {
      ++made();
      lock.unlock();
      try {
        s_ = new Staging;
      } catch (...) {
        std::lock_guard<std::mutex> again(mu());
        --made();
        ready().notify_one();
        throw;
      }
      return;
    }
    s_ = idle().back();
    idle().pop_back();
  }
  ~StagingLease() {
    {
      std::lock_guard<std::mutex> lock(mu());
      idle().push_back(s_);
    }
    ready().notify_one();
  }
  StagingLease(const StagingLease&) = delete;
  StagingLease& operator=(const StagingLease&) = delete;
  Staging& operator*() const { return *s_; }

 private:
  static std::mutex& mu() { static std::mutex m; return m; }
  static std::condition_variable& ready() { static std::condition_variable c; return c; }
  static std::vector<Staging*>& idle() { static auto* v = new std::vector<Staging*>; return *v; }
  static size_t& made() { static size_t n = 0; return n; }
  Staging* s_ = nullptr;
};

// f(b, e) over [0, n) on several threads, each a contiguous slice.
template <class F>
void on_slices(size_t n, F f) {
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  if (n < (size_t(1) << 18) || threads == 1) return f(size_t(0), n);
  const size_t per = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    const size_t b = t * per, e = std::min(n, b + per);
    if (b >= e) break;
    pool.emplace_back([=] { f(b, e); });
  }
  for (auto& th : pool) th.join();
}

// dst[i] = D(src[i]).
template <class S, class D>
void convert(const S* src, D* dst, size_t n) {
  on_slices(n, [=](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) dst[i] = static_cast<D>(src[i]);
  });
}

// dst[i] = the bf16 bit pattern of src[i]; false (dst then unspecified) where some value is not a
// bf16 number exactly. NaN counts as not: its payload may mean something (core/result.hpp's
// unwritten elements) and bf16 would not keep it.
bool encode_bf16(const double* src, uint16_t* dst, size_t n) {
  std::atomic<bool> exact{true};
  on_slices(n, [&](size_t b, size_t e) {
    bool ok = true;
    for (size_t i = b; i < e; ++i) {
      const float f = static_cast<float>(src[i]);
      const uint32_t u = std::bit_cast<uint32_t>(f);
      ok &= (static_cast<double>(f) == src[i]) & ((u & 0xFFFFu) == 0);
      dst[i] = static_cast<uint16_t>(u >> 16);
    }
    if (!ok) exact = false;
  });
  return exact;
}

constexpr size_t kCompactMin = size_t(1) << 16;  // smaller tensors: not worth a kernel launch

// to_device through bf16: the bit patterns up, widened on the device.
template <class R>
bool to_device_bf16(const double* host, R* dev, size_t n) {
  DeviceArray<uint16_t> bits(n);
  if (!to_device_bits(host, bits.get(), n)) return false;
  widen_bf16<R>(bits.get(), dev, static_cast<int64_t>(n));
  DSA_GPU_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  return true;
}

}  // namespace

template <class R>
void to_host(const R* dev, double* host, size_t n) {
  if (n == 0) return;
  // This thread's kernels that write `dev` first, so a staging is not held idle behind them.
  DSA_GPU_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  StagingLease lease;
  Staging& s = *lease;
  const size_t chunk = kChunkBytes / sizeof(R);
  const size_t chunks = (n + chunk - 1) / chunk;
  for (size_t i = 0; i <= chunks; ++i) {
    if (i < chunks) {  // start chunk i's DMA ...
      const size_t off = i * chunk, len = std::min(chunk, n - off);
      DSA_GPU_CUDA(cudaMemcpyAsync(s.buf[i % 2], dev + off, len * sizeof(R), cudaMemcpyDeviceToHost,
                                   cudaStreamPerThread));
      DSA_GPU_CUDA(cudaEventRecord(s.done[i % 2], cudaStreamPerThread));
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
  if (n >= kCompactMin && to_device_bf16(host, dev, n)) return;
  StagingLease lease;
  Staging& s = *lease;
  const size_t chunk = kChunkBytes / sizeof(R);
  const size_t chunks = (n + chunk - 1) / chunk;
  for (size_t i = 0; i < chunks; ++i) {
    const size_t off = i * chunk, len = std::min(chunk, n - off);
    if (i >= 2) DSA_GPU_CUDA(cudaEventSynchronize(s.done[i % 2]));  // the buffer's previous DMA is done
    convert(host + off, static_cast<R*>(s.buf[i % 2]), len);
    DSA_GPU_CUDA(cudaMemcpyAsync(dev + off, s.buf[i % 2], len * sizeof(R), cudaMemcpyHostToDevice,
                                 cudaStreamPerThread));
    DSA_GPU_CUDA(cudaEventRecord(s.done[i % 2], cudaStreamPerThread));
  }
  DSA_GPU_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
}

// Each chunk encoded into pinned memory while the one before is copied up.
bool to_device_bits(const double* host, uint16_t* dev, size_t n) {
  if (n == 0) return true;
  StagingLease lease;
  Staging& s = *lease;
  const size_t chunk = kChunkBytes / sizeof(uint16_t);
  const size_t chunks = (n + chunk - 1) / chunk;
  for (size_t i = 0; i < chunks; ++i) {
    const size_t off = i * chunk, len = std::min(chunk, n - off);
    if (i >= 2) DSA_GPU_CUDA(cudaEventSynchronize(s.done[i % 2]));  // the buffer's previous DMA is done
    if (!encode_bf16(host + off, static_cast<uint16_t*>(s.buf[i % 2]), len)) {
      DSA_GPU_CUDA(cudaStreamSynchronize(cudaStreamPerThread));  // nothing in flight reads the staging
      return false;
    }
    DSA_GPU_CUDA(cudaMemcpyAsync(dev + off, s.buf[i % 2], len * sizeof(uint16_t), cudaMemcpyHostToDevice,
                                 cudaStreamPerThread));
    DSA_GPU_CUDA(cudaEventRecord(s.done[i % 2], cudaStreamPerThread));
  }
  DSA_GPU_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  return true;
}

template void to_host<float>(const float*, double*, size_t);
template void to_host<double>(const double*, double*, size_t);
template void to_device<float>(const double*, float*, size_t);
template void to_device<double>(const double*, double*, size_t);

}  // namespace dsa::gpu
