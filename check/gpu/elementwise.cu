// Elementwise kernels: rounding at the policy's points, fills, row selection, block copies.
#include "check/gpu/device_common.cuh"
#include "check/gpu/kernels.hpp"

namespace dsa::gpu {
namespace {

template <class R> __global__ void round_k(R* x, int64_t n) {
  DSA_GRID_STRIDE(i, n) x[i] = bf(x[i]);
}
template <class R> __global__ void widen_bf16_k(const uint16_t* bits, R* x, int64_t n) {
  DSA_GRID_STRIDE(i, n) x[i] = static_cast<R>(__uint_as_float(uint32_t(bits[i]) << 16));
}
template <class R> __global__ void fill_k(R* x, int64_t n, R v) {
  DSA_GRID_STRIDE(i, n) x[i] = v;
}
template <class R> __global__ void select_rows_k(const R* src, const uint8_t* keep, int64_t rows, int64_t cols, R* dst) {
  DSA_GRID_STRIDE(i, rows * cols) dst[i] = keep[i / cols] ? src[i] : R(0);
}
template <class R>
__global__ void copy_block_k(const R* src, int64_t lds, R* dst, int64_t ldd, int64_t rows, int64_t cols, bool round) {
  DSA_GRID_STRIDE(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols;
    const R v = src[r * lds + c];
    dst[r * ldd + c] = round ? bf(v) : v;
  }
}

}  // namespace

template <class R> void round_bf16_inplace(R* x, int64_t n) {
  if (n <= 0) return;
  round_k<<<grid_for(n), kBlock>>>(x, n);
  DSA_GPU_LAUNCHED();
}
template <class R> void widen_bf16(const uint16_t* bits, R* x, int64_t n) {
  if (n <= 0) return;
  widen_bf16_k<<<grid_for(n), kBlock>>>(bits, x, n);
  DSA_GPU_LAUNCHED();
}
template <class R> void fill(R* x, int64_t n, R v) {
  if (n <= 0) return;
  fill_k<<<grid_for(n), kBlock>>>(x, n, v);
  DSA_GPU_LAUNCHED();
}
template <class R> void select_rows(const R* src, const uint8_t* keep, int64_t rows, int64_t cols, R* dst) {
  if (rows * cols <= 0) return;
  select_rows_k<<<grid_for(rows * cols), kBlock>>>(src, keep, rows, cols, dst);
  DSA_GPU_LAUNCHED();
}
template <class R>
void copy_block(const R* src, int64_t lds, R* dst, int64_t ldd, int64_t rows, int64_t cols, bool round) {
  if (rows * cols <= 0) return;
  copy_block_k<<<grid_for(rows * cols), kBlock>>>(src, lds, dst, ldd, rows, cols, round);
  DSA_GPU_LAUNCHED();
}

#define DSA_INSTANTIATE(R)                                                                 \
  template void round_bf16_inplace<R>(R*, int64_t);                                        \
  template void widen_bf16<R>(const uint16_t*, R*, int64_t);                               \
  template void fill<R>(R*, int64_t, R);                                                   \
  template void select_rows<R>(const R*, const uint8_t*, int64_t, int64_t, R*);            \
  template void copy_block<R>(const R*, int64_t, R*, int64_t, int64_t, int64_t, bool);
DSA_INSTANTIATE(float)
DSA_INSTANTIATE(double)

}  // namespace dsa::gpu
