// Gathers the key rows of each query row's key set into padded [B, kmax, cols] buffers (so that
// the attention is a batched GEMM per row), and scatters per-slot key gradients back. Only the
// listed keys are read: key rows nobody may see (NaN-poisoned pad rows) never enter any product.
#include "check/gpu/device_common.cuh"
#include "check/gpu/kernels.hpp"

namespace dsa::gpu {
namespace {

template <class R>
__global__ void gather_k(RowKeys k, const R* src, int64_t lds, int64_t cols, R* dst) {
  DSA_GRID_STRIDE(i, k.B * k.kmax * cols) {
    const int64_t c = i % cols, slot = i / cols, b = slot / k.kmax, j = slot % k.kmax;
    dst[i] = j < k.count[b] ? src[k.key(b, j) * lds + c] : R(0);
  }
}

template <class R>
__global__ void scatter_add_k(RowKeys k, const R* rows, int64_t cols, R* dst, int64_t ldd) {
  DSA_GRID_STRIDE(i, k.B * k.kmax * cols) {
    const int64_t c = i % cols, slot = i / cols, b = slot / k.kmax, j = slot % k.kmax;
    if (j < k.count[b]) atomicAdd(&dst[k.key(b, j) * ldd + c], rows[i]);
  }
}

}  // namespace

template <class R> void gather_keys(const RowKeys& k, const R* src, int64_t lds, int64_t cols, R* dst) {
  const int64_t n = k.B * k.kmax * cols;
  if (n <= 0) return;
  gather_k<<<grid_for(n), kBlock>>>(k, src, lds, cols, dst);
  DSA_GPU_LAUNCHED();
}
template <class R> void scatter_add_keys(const RowKeys& k, const R* rows, int64_t cols, R* dst, int64_t ldd) {
  const int64_t n = k.B * k.kmax * cols;
  if (n <= 0) return;
  scatter_add_k<<<grid_for(n), kBlock>>>(k, rows, cols, dst, ldd);
  DSA_GPU_LAUNCHED();
}

template void gather_keys<float>(const RowKeys&, const float*, int64_t, int64_t, float*);
template void gather_keys<double>(const RowKeys&, const double*, int64_t, int64_t, double*);
template void scatter_add_keys<float>(const RowKeys&, const float*, int64_t, float*, int64_t);
template void scatter_add_keys<double>(const RowKeys&, const double*, int64_t, double*, int64_t);

}  // namespace dsa::gpu
