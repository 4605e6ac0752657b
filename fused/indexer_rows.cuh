// The visible key range of a local query row as the indexer and loss kernels see it, with the
// kernel-side planted visibility bugs (README "Planted kernel bugs"): one place for both kernels.
#pragma once

#include <cstdint>

#include "fused/api.cuh"

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

}  // namespace dsa::fused
