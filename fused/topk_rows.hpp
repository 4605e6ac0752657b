// SPEC §4's top-k of query rows whose indexer scores are already in memory: the second phase of
// the two-phase indexer (indexer_topk's IndexerKernel::two_phase), any device.
#pragma once

#include <cstddef>

#include "fused/api.cuh"

namespace dsa::fused {

// Rows [row0, row0 + rows) of `scores`, stored from row0 on: local row i's score of key t at
// scores[(i − row0)·ld + t], read only over the row's visible range.
struct ScoreRows {
  const float* scores;
  size_t ld;
  int row0, rows;
};

// The candidate buffer (slots a CTA) topk_rows takes for a.K: 2·K' rounded up to 32, at least
// K' + 256, as much of that as fits shared memory, never less than K' (0: K' does not fit).
int topk_rows_cap(const IndexerArgs& a);
// Writes a.topk (and a.topk_scores when set) of those rows as the streaming kernels do: SPEC §4's
// canonical order, −1 after. cap overrides topk_rows_cap (tests: ≥ K', rounded up to 32).
void topk_rows(const IndexerArgs& a, const ScoreRows& in, cudaStream_t s, int cap = 0);

}  // namespace dsa::fused
