// Contracts between the fused stages (device pointers, one rank's view). Query-side tensors hold
// the rank's local rows (Tq of them, in local order); key-side tensors hold all Tp rows in global
// order (after the all-gather). Inputs are bf16; fp32 outputs are rounded to bf16 by the host API
// where SPEC.md §8 says so. Indices are global stream rows; a slot < 0 is empty.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace dsa::fused {

using bf16 = __nv_bfloat16;

// Per local row: global index and visible key range [key_begin, key_end) (empty for masked pad rows).
struct RowRanges {
  const int32_t* row_global;  // [Tq]
  const int32_t* key_begin;   // [Tq]
  const int32_t* key_end;     // [Tq]
};

// Indexer scores I[g,t] = Σ_h w[g,h]·φ(q_I[g,h]·k_I[t]) fused with a streaming top-k (SPEC.md §3–§4).
struct IndexerArgs {
  const bf16* q_I;   // [Tq, HI, DI]
  const bf16* w;     // [Tq, HI]
  const bf16* k_I;   // [Tp, DI]
  RowRanges rows;
  int Tq, Tp, HI, DI, K;  // K is the slot count K' = min(K, Tp)
  bool relu;
  int32_t* topk;     // [Tq, K] out: the selected keys (any order), −1 in unused slots
  float* scores;     // [Tq, Tp] out, −inf where not visible; nullptr: not materialized
  // [Tq, K] out, optional: the score of each slot of `topk` (−inf in unused slots), which the
  // sparse loss reads instead of scoring the selected keys again (LossArgs::scores).
  float* topk_scores = nullptr;
};
// Which kernel runs it: `wgmma` (sm_90, HI ≤ 64, DI ≤ 128): scores and a streaming top-k in one
// kernel, nothing materialized; `mma` (any shape, sm_80+): the same streaming kernel on mma.sync;
// `two_phase` (the wgmma rule): the wgmma scores of a block of rows into a workspace of at most
// 128 MiB (a.scores itself when set), then a top-k kernel over them (fused/topk_rows.cu), block by
// block. `best` takes wgmma where it fits, else mma (two_phase only when asked for, until it is
// measured on a device); forcing two_phase or wgmma where it does not fit throws
// std::invalid_argument.
enum class IndexerKernel { best, mma, wgmma, two_phase };
void indexer_topk(const IndexerArgs& a, cudaStream_t s, IndexerKernel kernel = IndexerKernel::best);
// The kernel `best` picks for a.
IndexerKernel indexer_topk_kernel_for(const IndexerArgs& a);

// I[g, j] = Σ_h w[g,h]·φ(q_I[g,h]·k_I[indices[g,j]]) at given slots, −inf where the slot is < 0
// or ≥ Tp: the LossArgs::scores of an index set the indexer did not select (a benchmark's pattern).
struct SlotScoresArgs {
  const bf16* q_I;          // [Tq, HI, DI]
  const bf16* w;            // [Tq, HI]
  const bf16* k_I;          // [Tp, DI]
  const int32_t* indices;   // [Tq, K]
  int Tq, Tp, HI, DI, K;
  bool relu;
  float* scores;            // [Tq, K] out
};
void indexer_scores_at(const SlotScoresArgs& a, cudaStream_t s);

// The indexer KL loss (SPEC.md §7) forward and backward, one launch sequence. Sparse mode streams
// over the attention's indices and reuses its lse (or its T^, `target`); dense mode covers every
// visible key.
struct LossArgs {
  const bf16* Qt;      // [Tq, H, C+R] absorbed queries Q~ (bf16, as the attention used them)
  const bf16* c;       // [Tp, C]
  const bf16* k_pe;    // [Tp, R]
  const float* lse;    // [Tq, H] the attention's lse over S(g) (sparse mode)
  const int32_t* indices;  // [Tq, K] the attention's indices (sparse mode support S(g))
  const bf16* q_I;     // [Tq, HI, DI]
  const bf16* w;       // [Tq, HI]
  const bf16* k_I;     // [Tp, DI]
  RowRanges rows;
  int Tq, Tp, H, C, R, HI, DI, K;
  float softmax_scale;
  bool relu, dense;    // dense: support = all visible keys; else S(g)
  float coeff_over_N;  // coeff / N, N the global counted-row count
  const uint8_t* counted;  // [Tq] 1 where the row counts in the loss
  float* kl;           // [Tq] out: per-row KL (unscaled)
  float* dq_I;         // [Tq, HI, DI] out
  float* dk_I;         // [Tp, DI] out: this rank's partial (reduce-scattered by the caller); zeroed by the callee
  float* dw;           // [Tq, HI] out
  // Sparse mode, optional: T^ per slot of `indices` from the attention backward (AttnBwdArgs::target).
  // Given, the loss reads it instead of recomputing the logits s·Q~·K~, and runs without Q~ in
  // shared memory (several CTAs per SM); Qt, c, k_pe and lse are then not read.
  const float* target = nullptr;
  // With `target`, optional: the indexer score I of each slot of `indices` (−inf or anything where
  // the slot is not in S(g)), as the indexer computed it when it selected them (IndexerArgs::
  // topk_scores, carried through select_keys). Given, the loss takes lse(I) over S(g) from it
  // instead of a first pass over the keys, and its I in the gradient too, so both are one set of
  // values; only q_I·k_I is recomputed (φ'(u) and φ(u) per head for du and dw).
  const float* scores = nullptr;
};
void indexer_loss(const LossArgs& a, cudaStream_t s);

}  // namespace dsa::fused
