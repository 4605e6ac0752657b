// Softmax over each (row, head)'s keys: the attention's lse and P (SPEC.md §5), recomputed from
// the stored lse in the backward, and A_h of the KL target (SPEC.md §7; the streaming form reuses
// the attention's lse, the plain form normalizes afresh).
#include "check/gpu/device_common.cuh"
#include "check/gpu/kernels.hpp"

namespace dsa::gpu {
namespace {

template <class R>
__global__ void softmax_rows_k(R* x, R* Pb, const int32_t* count, int64_t H, int64_t kmax, const R* lse_in,
                               R* lse_out) {
  const int64_t row = blockIdx.x;  // b·H + h
  const int64_t b = row / H;
  const int64_t n = count[b];
  R* l = x + row * kmax;
  R norm;
  if (lse_in) {
    norm = lse_in[row];
  } else if (n == 0) {
    norm = neg_inf<R>();
  } else {
    R m = neg_inf<R>();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = max(m, l[j]);
    m = block_max(m);
    R s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += exp_(l[j] - m);
    s = block_sum(s);
    norm = m + log_(s);
  }
  if (lse_out && threadIdx.x == 0) lse_out[row] = norm;
  __syncthreads();  // every thread has read l before it is overwritten
  for (int64_t j = threadIdx.x; j < kmax; j += blockDim.x) {
    const R p = j < n ? exp_(l[j] - norm) : R(0);
    l[j] = p;
    if (Pb) Pb[row * kmax + j] = bf(p);
  }
}

}  // namespace

template <class R>
void softmax_rows(R* x, R* Pb, const int32_t* count, int64_t B, int64_t H, int64_t kmax, const R* lse_in,
                  R* lse_out) {
  if (B * H <= 0 || kmax <= 0) return;
  softmax_rows_k<<<static_cast<unsigned>(B * H), kBlock>>>(x, Pb, count, H, kmax, lse_in, lse_out);
  DSA_GPU_LAUNCHED();
}

template void softmax_rows<float>(float*, float*, const int32_t*, int64_t, int64_t, int64_t, const float*, float*);
template void softmax_rows<double>(double*, double*, const int32_t*, int64_t, int64_t, int64_t, const double*,
                                   double*);

}  // namespace dsa::gpu
