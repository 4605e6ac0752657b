// Sparse MLA attention (absorbed, SPEC.md §5–§6) on one rank's local query rows: key selection,
// forward and backward on tensor cores. Device pointers; key-side tensors hold all Tp rows in
// global order. Callable from host C++ (no kernel code here).
#pragma once

#include <cstdint>

#include "fused/api.cuh"

namespace dsa::fused {

// S(g): the slots of indices[g, :] that are usable (0 ≤ t < Tp and key_begin(g) ≤ t < key_end(g)),
// each key once (a set), sorted, in sel[g, 0:count[g]); the rest of sel[g, :] is −1. The attention never
// trusts the indexer for causality: this is where −1, INT_MIN, ≥Tp and non-causal slots drop out.
struct SelectArgs {
  const int32_t* indices;  // [Tq, K]
  RowRanges rows;
  int Tq, Tp, K;
  int32_t* sel;    // [Tq, K] out
  int32_t* count;  // [Tq] out
  // Optional: a value per slot of `indices` (the indexer's score, IndexerArgs::topk_scores) that
  // travels with its key: sel_values[g, j] is the value of sel[g, j]'s slot (of one of its slots,
  // if the key repeats), −inf past count[g].
  const float* values = nullptr;  // [Tq, K]
  float* sel_values = nullptr;    // [Tq, K] out
};
void select_keys(const SelectArgs& a, cudaStream_t s);

// O_lat[g,h] = Σ_{t∈S(g)} softmax(s·Q~[g,h]·K~[t]) · c[t];  lse natural log, −inf for empty S(g).
struct AttnFwdArgs {
  const bf16* Qt;      // [Tq, H, C+R]
  const bf16* c;       // [Tp, C]
  const bf16* k_pe;    // [Tp, R]
  const int32_t* sel;  // [Tq, K] compacted (select_keys)
  const int32_t* count;
  int Tq, Tp, H, C, R, K;
  float scale;
  bf16* O_lat;  // [Tq, H, C] out
  float* lse;   // [Tq, H] out
};
// Which kernel runs it: `best` takes the Hopper wgmma kernel where it fits (sm_90, C = 512,
// C + R ≤ 576, R % 8 == 0) and the mma.sync kernel (any shape, sm_80+) otherwise; `mma` and
// `wgmma` force one (wgmma throws std::invalid_argument where it does not fit).
enum class FwdKernel { best, mma, wgmma };
void attention_forward(const AttnFwdArgs& a, cudaStream_t s, FwdKernel kernel = FwdKernel::best);
// The kernel `best` picks for a.
FwdKernel attention_forward_kernel_for(const AttnFwdArgs& a);

// Δ[g,h] = Σ_c dO_lat[g,h,c]·O_lat[g,h,c] (bf16 operands, fp32 sum).
void attention_delta(const bf16* dO_lat, const bf16* O_lat, float* delta, int64_t rows, int C, cudaStream_t s);

// dQ~ (written bf16) and dK~ += (fp32, atomics over queries: dc part = s·dS·Q~_nope + P·dO_lat,
// dk_pe part = s·dS·q_pe), P recomputed from lse. With `target`, also the indexer loss's sparse
// target T^[g, slot] = Σ_h P[g,h,slot] (SPEC.md §7, before normalization), so that the loss need not
// recompute the logits: the attention's own P, in fp32, summed over heads.
struct AttnBwdArgs {
  const bf16* Qt;      // [Tq, H, C+R]
  const bf16* c;       // [Tp, C]
  const bf16* k_pe;    // [Tp, R]
  const int32_t* sel;  // [Tq, K]
  const int32_t* count;
  const bf16* dO_lat;  // [Tq, H, C]
  const float* lse;    // [Tq, H]
  const float* delta;  // [Tq, H]
  int Tq, Tp, H, C, R, K;
  float scale;
  bf16* dQt;  // [Tq, H, C+R] out
  float* dK;  // [Tp, C+R] accumulated into (the caller zeroes it)
  // [Tq, K] out, optional (H ≤ 128): T^ of slot j < count[g] of sel; the caller zeroes it. Each of
  // the ≤ 2 head groups adds its part once, and 0 + a + b is the same number in either order, so
  // T^ is bitwise deterministic although it is summed with atomics.
  float* target = nullptr;
};
// Which kernel runs it, as for the forward: `best` takes the Hopper wgmma kernel where it fits
// (sm_90, C = 512, C + R ≤ 576, R % 8 == 0) and the mma.sync kernel (any shape) otherwise.
enum class BwdKernel { best, mma, wgmma };
void attention_backward(const AttnBwdArgs& a, cudaStream_t s, BwdKernel kernel = BwdKernel::best);
// The kernel `best` picks for a.
BwdKernel attention_backward_kernel_for(const AttnBwdArgs& a);

}  // namespace dsa::fused
