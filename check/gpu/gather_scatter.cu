// Gathers the key rows of each query row's key set into padded [B, kmax, cols] buffers (so that
// the attention is a batched GEMM per row), scatters per-slot key gradients back, and packs
// per-slot values into the key sets' CSR order (and back). Only the listed keys are read: key rows
// nobody may see (NaN-poisoned pad rows) never enter any product.
//
// One warp per slot, lanes over the columns: a slot's row is one coalesced read (or atomic run),
// and the slot's (b, j) is found once per warp. An element-per-thread loop paid three 64-bit
// divisions per element, more than the memory traffic at 10^9 slots·columns.
#include "check/gpu/device_common.cuh"
#include "check/gpu/kernels.hpp"

namespace dsa::gpu {
namespace {

constexpr int kSlotsPerBlock = kBlock / 32;

// This warp's slot of the chunk (b, j), or false past the last one.
__device__ __forceinline__ bool warp_slot(const RowKeys& k, int64_t& slot, int64_t& b, int64_t& j) {
  slot = blockIdx.x * int64_t(kSlotsPerBlock) + (threadIdx.x >> 5);
  if (slot >= k.B * k.kmax) return false;
  b = slot / k.kmax, j = slot - b * k.kmax;
  return true;
}

template <class R>
__global__ void gather_k(RowKeys k, const R* src, int64_t lds, int64_t cols, R* dst) {
  int64_t slot, b, j;
  if (!warp_slot(k, slot, b, j)) return;
  R* out = dst + slot * cols;
  const int lane = threadIdx.x & 31;
  if (j < k.count[b]) {
    const R* in = src + k.key(b, j) * lds;
    for (int64_t c = lane; c < cols; c += 32) out[c] = in[c];
  } else {
    for (int64_t c = lane; c < cols; c += 32) out[c] = R(0);
  }
}

template <class R>
__global__ void scatter_add_k(RowKeys k, const R* rows, int64_t cols, R* dst, int64_t ldd) {
  int64_t slot, b, j;
  if (!warp_slot(k, slot, b, j) || j >= k.count[b]) return;
  const R* in = rows + slot * cols;
  R* out = dst + k.key(b, j) * ldd;
  for (int64_t c = threadIdx.x & 31; c < cols; c += 32) atomicAdd(&out[c], in[c]);
}

// Block per row b, threads over its slots.
template <class R> __global__ void pack_k(RowKeys k, const R* padded, R* packed) {
  const int64_t b = blockIdx.x, n = k.count[b];
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) packed[k.offset[b] + j] = padded[b * k.kmax + j];
}
template <class R> __global__ void unpack_k(RowKeys k, const R* packed, R* padded) {
  const int64_t b = blockIdx.x, n = k.count[b];
  for (int64_t j = threadIdx.x; j < k.kmax; j += blockDim.x) padded[b * k.kmax + j] = j < n ? packed[k.offset[b] + j] : R(0);
}

unsigned slot_blocks(const RowKeys& k) { return static_cast<unsigned>((k.B * k.kmax + kSlotsPerBlock - 1) / kSlotsPerBlock); }

}  // namespace

template <class R> void gather_keys(const RowKeys& k, const R* src, int64_t lds, int64_t cols, R* dst) {
  if (k.B * k.kmax <= 0 || cols <= 0) return;
  gather_k<<<slot_blocks(k), kBlock>>>(k, src, lds, cols, dst);
  DSA_GPU_LAUNCHED();
}
template <class R> void scatter_add_keys(const RowKeys& k, const R* rows, int64_t cols, R* dst, int64_t ldd) {
  if (k.B * k.kmax <= 0 || cols <= 0) return;
  scatter_add_k<<<slot_blocks(k), kBlock>>>(k, rows, cols, dst, ldd);
  DSA_GPU_LAUNCHED();
}
template <class R> void pack_rows(const RowKeys& k, const R* padded, R* packed) {
  if (k.B <= 0 || k.kmax <= 0) return;
  pack_k<<<static_cast<unsigned>(k.B), kBlock>>>(k, padded, packed);
  DSA_GPU_LAUNCHED();
}
template <class R> void unpack_rows(const RowKeys& k, const R* packed, R* padded) {
  if (k.B <= 0 || k.kmax <= 0) return;
  unpack_k<<<static_cast<unsigned>(k.B), kBlock>>>(k, packed, padded);
  DSA_GPU_LAUNCHED();
}

#define DSA_INSTANTIATE(R)                                                               \
  template void gather_keys<R>(const RowKeys&, const R*, int64_t, int64_t, R*);          \
  template void scatter_add_keys<R>(const RowKeys&, const R*, int64_t, R*, int64_t);     \
  template void pack_rows<R>(const RowKeys&, const R*, R*);                              \
  template void unpack_rows<R>(const RowKeys&, const R*, R*);
DSA_INSTANTIATE(float)
DSA_INSTANTIATE(double)

}  // namespace dsa::gpu
