// Canonical top-k (SPEC.md §4) on the device: each row's visible scores sorted descending by a
// segmented radix sort of (score, key) pairs. The keys enter in ascending order and the sort is
// stable, so equal scores keep the lower key first: exactly the canonical tie rule.
#include <cub/device/device_segmented_sort.cuh>

#include "check/gpu/device_common.cuh"
#include "check/gpu/kernels.hpp"

namespace dsa::gpu {
namespace {

__global__ void segments_k(const int32_t* kbegin, const int32_t* kend, int64_t B, int64_t Tp, int64_t* seg_begin,
                           int64_t* seg_end) {
  DSA_GRID_STRIDE(b, B) {
    seg_begin[b] = b * Tp + kbegin[b];
    seg_end[b] = b * Tp + (kend[b] > kbegin[b] ? kend[b] : kbegin[b]);
  }
}

__global__ void take_k(const int32_t* sorted, const int32_t* kbegin, const int32_t* kend, int64_t B, int64_t Tp,
                       int64_t Kw, int32_t* topk) {
  DSA_GRID_STRIDE(i, B * Kw) {
    const int64_t b = i / Kw, j = i % Kw;
    const int64_t n = kend[b] - kbegin[b];
    topk[i] = j < n ? sorted[b * Tp + kbegin[b] + j] : -1;
  }
}

}  // namespace

template <class R>
TopkSorter<R>::TopkSorter(int64_t max_rows, int64_t Tp) : max_rows_(max_rows), tp_(Tp) {
  const int64_t n = max_rows * Tp;
  keys_out_ = static_cast<decltype(keys_out_)>(pool_alloc(n * sizeof(R)));
  vals_out_ = static_cast<decltype(vals_out_)>(pool_alloc(n * sizeof(int32_t)));
  seg_begin_ = static_cast<decltype(seg_begin_)>(pool_alloc(max_rows * sizeof(int64_t)));
  seg_end_ = static_cast<decltype(seg_end_)>(pool_alloc(max_rows * sizeof(int64_t)));
  // Temp storage for the largest chunk; a smaller chunk needs no more.
  DSA_GPU_CUDA(cub::DeviceSegmentedSort::StableSortPairsDescending(
      nullptr, temp_bytes_, static_cast<const R*>(nullptr), keys_out_, static_cast<const int32_t*>(nullptr),
      vals_out_, n, max_rows, seg_begin_, seg_end_));
  temp_ = static_cast<decltype(temp_)>(pool_alloc(temp_bytes_ ? temp_bytes_ : 1));
}

template <class R>
TopkSorter<R>::~TopkSorter() {
  pool_free(temp_);
  pool_free(keys_out_);
  pool_free(vals_out_);
  pool_free(seg_begin_);
  pool_free(seg_end_);
}

template <class R>
void TopkSorter<R>::run(const R* scores, const int32_t* vals, const int32_t* kbegin, const int32_t* kend, int64_t B,
                        int64_t Kw, int32_t* topk) {
  if (B <= 0) return;
  if (B > max_rows_) fail("top-k chunk larger than planned", __FILE__, __LINE__);
  segments_k<<<grid_for(B), kBlock>>>(kbegin, kend, B, tp_, seg_begin_, seg_end_);
  DSA_GPU_LAUNCHED();
  size_t bytes = temp_bytes_;
  DSA_GPU_CUDA(cub::DeviceSegmentedSort::StableSortPairsDescending(temp_, bytes, scores, keys_out_, vals, vals_out_,
                                                                   B * tp_, B, seg_begin_, seg_end_));
  take_k<<<grid_for(B * Kw), kBlock>>>(vals_out_, kbegin, kend, B, tp_, Kw, topk);
  DSA_GPU_LAUNCHED();
}

template class TopkSorter<float>;
template class TopkSorter<double>;

}  // namespace dsa::gpu
