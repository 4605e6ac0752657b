// The visible key range of a local query row as the indexer and loss kernels see it, with the
// kernel-side planted visibility bugs (README "Planted kernel bugs"): one place for both kernels;
// and the last step of both indexer kernels, a row's candidate buffer into its K' output slots.
#pragma once

#include <cstdint>

#include "fused/api.cuh"
#include "fused/topk_select.cuh"

namespace dsa::fused {

struct KeyRange {
  int begin, end;  // [begin, end) ⊆ [0, Tp); empty when begin >= end
};

__device__ __forceinline__ KeyRange visible_range(const RowRanges& rows, int i, int Tp) {
  KeyRange r{rows.key_begin[i], rows.key_end[i]};
#if DSA_MUTANT_causal_end_off_by_one
  if (r.end > r.begin && r.end < Tp) ++r.end;  // the key right after the row becomes visible
#endif
#if DSA_MUTANT_pad_keys_visible
  if (r.end > r.begin && r.begin > 0) --r.begin;  // the previous segment's (pad) tail becomes visible
#endif
  if (r.begin < 0) r.begin = 0;
  if (r.end > Tp) r.end = Tp;
  return r;
}

// The indexer's activation φ (SPEC §3): ReLU, or the identity without it.
__device__ __forceinline__ float phi(float u, bool relu) { return relu ? fmaxf(u, 0.f) : u; }

// Local row i's n candidates (key, idx) into its K' = a.K slots: a last select when it holds more,
// SPEC §4's canonical order, −1 after; the slot scores too when asked for. All kSelThreads threads.
__device__ __forceinline__ void write_topk_row(uint32_t* key, int32_t* idx, int n, const IndexerArgs& a, int i,
                                               SelectScratch& scr) {
  if (n > a.K) {
    select_top(key, idx, n, a.K, scr);
    n = a.K;
  }
  sort_canonical(key, idx, n);
  for (int j = threadIdx.x; j < a.K; j += kSelThreads) a.topk[size_t(i) * a.K + j] = j < n ? idx[j] : -1;
  if (a.topk_scores)
    for (int j = threadIdx.x; j < a.K; j += kSelThreads)
      a.topk_scores[size_t(i) * a.K + j] = j < n ? score_of_key(key[j]) : -__builtin_huge_valf();
}

}  // namespace dsa::fused
