// Error checks and an owning device array for the GPU oracle (plain C++, no nvcc needed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace dsa::gpu {

[[noreturn]] inline void fail(const std::string& what, const char* file, int line) {
  throw std::runtime_error("gpu oracle: " + what + " (" + file + ":" + std::to_string(line) + ")");
}

#define DSA_GPU_CUDA(expr)                                                                       \
  do {                                                                                           \
    cudaError_t e_ = (expr);                                                                     \
    if (e_ != cudaSuccess) ::dsa::gpu::fail(std::string(#expr) + ": " + cudaGetErrorString(e_), \
                                            __FILE__, __LINE__);                                 \
  } while (0)
#define DSA_GPU_BLAS(expr)                                                                          \
  do {                                                                                              \
    cublasStatus_t s_ = (expr);                                                                     \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                                \
      ::dsa::gpu::fail(std::string(#expr) + ": cublas status " + std::to_string(int(s_)), __FILE__, \
                       __LINE__);                                                                   \
  } while (0)
// After a kernel launch: launch errors show at once, execution errors at the next sync.
#define DSA_GPU_LAUNCHED() DSA_GPU_CUDA(cudaGetLastError())

// Device memory from the device's default pool, stream-ordered on the calling thread's default
// stream (this library is built with per-thread default streams: every kernel, copy and GEMM of a
// thread is ordered on it). An oracle run allocates a few dozen
// arrays and a nightly runs thousands of small cases: cudaMalloc/cudaFree cost ~0.1–1 ms each and
// cudaFree synchronizes the device, while the pool hands freed blocks back at once. The pool keeps
// up to pool_keep_bytes() cached between runs; above that it returns memory to the device.
void* pool_alloc(size_t bytes);
void pool_free(void* p);

// An owning, zero-initialized device array of n elements.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) { reset(n); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(p_, o.p_), std::swap(n_, o.n_);
    return *this;
  }
  ~DeviceArray() { if (p_) pool_free(p_); }

  void reset(size_t n) {
    if (p_) pool_free(p_), p_ = nullptr;
    n_ = n;
    if (n == 0) return;
    p_ = static_cast<T*>(pool_alloc(n * sizeof(T)));
    zero();
  }
  void zero() { if (n_) DSA_GPU_CUDA(cudaMemset(p_, 0, n_ * sizeof(T))); }
  void upload(const std::vector<T>& h) {
    if (h.size() != n_) reset(h.size());
    if (n_) DSA_GPU_CUDA(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    if (n_) DSA_GPU_CUDA(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  T* get() { return p_; }
  const T* get() const { return p_; }
  // Gives up ownership: the caller pool_free()s the pointer.
  T* release() {
    T* p = p_;
    p_ = nullptr, n_ = 0;
    return p;
  }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace dsa::gpu
