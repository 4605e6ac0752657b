// Indexer scores I[g, t] = Σ_h w[g, h]·φ(q_I[g, h]·k_I[t]) (SPEC.md §3). The products
// U = q_I·k_Iᵀ are one GEMM over all keys of a chunk of rows; this kernel applies φ, the head
// weights and the visibility mask.
#include "check/gpu/device_common.cuh"
#include "check/gpu/kernels.hpp"

namespace dsa::gpu {
namespace {

template <class R>
__global__ void indexer_scores_k(const R* U, const R* w, const int32_t* kbegin, const int32_t* kend, int64_t B,
                                 int64_t HI, int64_t Tp, bool relu, R* scores, int32_t* vals) {
  DSA_GRID_STRIDE(i, B * Tp) {
    const int64_t b = i / Tp, t = i % Tp;
    vals[i] = static_cast<int32_t>(t);
    if (t < kbegin[b] || t >= kend[b]) {
      scores[i] = neg_inf<R>();  // selected, not computed: U may be NaN for a poisoned key row
      continue;
    }
    R acc = 0;
    for (int64_t h = 0; h < HI; ++h) {  // heads in order, as the reference sums them
      const R u = U[(b * HI + h) * Tp + t];
      acc += w[b * HI + h] * (relu ? (u > R(0) ? u : R(0)) : u);
    }
    scores[i] = acc == R(0) ? R(0) : acc;  // one zero for the sort: −0 and +0 tie
  }
}

}  // namespace

template <class R>
void indexer_scores(const R* U, const R* w, const int32_t* kbegin, const int32_t* kend, int64_t B, int64_t HI,
                    int64_t Tp, bool relu, R* scores, int32_t* vals) {
  if (B * Tp <= 0) return;
  indexer_scores_k<<<grid_for(B * Tp), kBlock>>>(U, w, kbegin, kend, B, HI, Tp, relu, scores, vals);
  DSA_GPU_LAUNCHED();
}

template void indexer_scores<float>(const float*, const float*, const int32_t*, const int32_t*, int64_t, int64_t,
                                    int64_t, bool, float*, int32_t*);
template void indexer_scores<double>(const double*, const double*, const int32_t*, const int32_t*, int64_t,
                                     int64_t, int64_t, bool, double*, int32_t*);

}  // namespace dsa::gpu
