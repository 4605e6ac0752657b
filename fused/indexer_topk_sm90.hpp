// The Hopper (wgmma) indexer of indexer_topk_sm90.cu, behind indexer_topk(): the streaming kernel
// (scores and top-k in one pass) and the scores-only kernel of the two-phase path.
#pragma once

#include "fused/api.cuh"
#include "fused/topk_rows.hpp"

namespace dsa::fused {

// True when this device and shape can take the wgmma kernel: compute capability 9.0 with sm_90a
// code in the binary, HI ≤ 64, DI ≤ 128, and a candidate buffer of K' + 128 slots a row fits.
bool indexer_topk_sm90_fits(const IndexerArgs& a);
// Launches it; the caller (indexer_topk) has checked indexer_topk_sm90_fits(a).
void indexer_topk_sm90(const IndexerArgs& a, cudaStream_t s);

// The same device and HI, DI rule for the scores-only kernel (it has no candidate buffers).
bool indexer_scores_sm90_fits(const IndexerArgs& a);
// Every visible score of local rows [out.row0, out.row0 + out.rows) into out (its ScoreRows
// layout; other entries untouched), bit for bit the streaming kernel's scores. The caller has
// checked indexer_scores_sm90_fits(a).
void indexer_scores_sm90(const IndexerArgs& a, const ScoreRows& out, cudaStream_t s);

// IndexerKernel::two_phase with its sizes open (tests make them small to reach every path): the
// workspace's bytes (rows a block: as many as fit, at least 4) and topk_rows's buffer (0: its own).
struct TwoPhaseSizes {
  size_t workspace_bytes = size_t(128) << 20;
  int cap = 0;
};
void indexer_topk_two_phase(const IndexerArgs& a, cudaStream_t s, const TwoPhaseSizes& sizes = {});

}  // namespace dsa::fused
