// The Hopper (wgmma) indexer + streaming top-k of indexer_topk_sm90.cu, behind indexer_topk().
#pragma once

#include "fused/api.cuh"

namespace dsa::fused {

// True when this device and shape can take the wgmma kernel: compute capability 9.0 with sm_90a
// code in the binary, HI ≤ 64, DI ≤ 128, and a candidate buffer of K' + 128 slots a row fits.
bool indexer_topk_sm90_fits(const IndexerArgs& a);
// Launches it; the caller (indexer_topk) has checked indexer_topk_sm90_fits(a).
void indexer_topk_sm90(const IndexerArgs& a, cudaStream_t s);

}  // namespace dsa::fused
