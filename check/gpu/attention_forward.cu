// Sparse MLA forward pieces that are not GEMMs (SPEC.md §5): the rope half of Q~, and the
// explicit (non-absorbed) path's per-head logits and outputs, which read the materialized
// k_nope / v of each selected key. The explicit path is the small-case parity check of the
// absorbed one, so plain loops are enough here.
#include "check/gpu/device_common.cuh"
#include "check/gpu/kernels.hpp"

namespace dsa::gpu {
namespace {

template <class R>
__global__ void place_q_pe_k(const R* q_pe, int64_t B, int64_t H, int64_t C, int64_t Rr, R* Qt) {
  DSA_GRID_STRIDE(i, B * H * Rr) {
    const int64_t r = i % Rr, bh = i / Rr;
    Qt[bh * (C + Rr) + C + r] = q_pe[i];
  }
}

template <class R>
__global__ void explicit_logits_k(RowKeys k, const R* q_nope, const R* q_pe, const R* k_nope, const R* k_pe,
                                  int64_t H, int64_t Dn, int64_t Rr, R s, R* logits) {
  DSA_GRID_STRIDE(i, k.B * H * k.kmax) {
    const int64_t j = i % k.kmax, bh = i / k.kmax, h = bh % H, b = bh / H;
    if (j >= k.count[b]) {
      logits[i] = 0;
      continue;
    }
    const int64_t t = k.key(b, j);
    const R* qn = q_nope + bh * Dn;
    const R* kn = k_nope + (t * H + h) * Dn;
    const R* qp = q_pe + bh * Rr;
    const R* kp = k_pe + t * Rr;
    R a = 0, c = 0;
    for (int64_t d = 0; d < Dn; ++d) a += qn[d] * kn[d];
    for (int64_t d = 0; d < Rr; ++d) c += qp[d] * kp[d];
    logits[i] = s * (a + c);
  }
}

template <class R>
__global__ void explicit_output_k(RowKeys k, const R* Pb, const R* v, int64_t H, int64_t Dv, R* O) {
  DSA_GRID_STRIDE(i, k.B * H * Dv) {
    const int64_t e = i % Dv, bh = i / Dv, h = bh % H, b = bh / H;
    const R* p = Pb + bh * k.kmax;
    R acc = 0;
    for (int64_t j = 0; j < k.count[b]; ++j) acc += p[j] * v[(k.key(b, j) * H + h) * Dv + e];
    O[i] = acc;
  }
}

}  // namespace

template <class R> void place_q_pe(const R* q_pe, int64_t B, int64_t H, int64_t C, int64_t Rr, R* Qt) {
  if (B * H * Rr <= 0) return;
  place_q_pe_k<<<grid_for(B * H * Rr), kBlock>>>(q_pe, B, H, C, Rr, Qt);
  DSA_GPU_LAUNCHED();
}
template <class R>
void explicit_logits(const RowKeys& k, const R* q_nope, const R* q_pe, const R* k_nope, const R* k_pe, int64_t H,
                     int64_t Dn, int64_t Rr, R s, R* logits) {
  const int64_t n = k.B * H * k.kmax;
  if (n <= 0) return;
  explicit_logits_k<<<grid_for(n), kBlock>>>(k, q_nope, q_pe, k_nope, k_pe, H, Dn, Rr, s, logits);
  DSA_GPU_LAUNCHED();
}
template <class R> void explicit_output(const RowKeys& k, const R* Pb, const R* v, int64_t H, int64_t Dv, R* O) {
  const int64_t n = k.B * H * Dv;
  if (n <= 0) return;
  explicit_output_k<<<grid_for(n), kBlock>>>(k, Pb, v, H, Dv, O);
  DSA_GPU_LAUNCHED();
}

#define DSA_INSTANTIATE(R)                                                                                   \
  template void place_q_pe<R>(const R*, int64_t, int64_t, int64_t, int64_t, R*);                             \
  template void explicit_logits<R>(const RowKeys&, const R*, const R*, const R*, const R*, int64_t, int64_t, \
                                   int64_t, R, R*);                                                          \
  template void explicit_output<R>(const RowKeys&, const R*, const R*, int64_t, int64_t, R*);
DSA_INSTANTIATE(float)
DSA_INSTANTIATE(double)

}  // namespace dsa::gpu
