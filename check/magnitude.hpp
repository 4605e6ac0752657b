// The size of what a stage's fp32 sums pass through: the scale of the floors of the outputs that
// cancel (check/judge.cpp). Where a result is far smaller than its terms, any fp32 summation order
// is off by about an fp32 ulp of the terms, which a floor relative to the largest result cannot
// see; the lowp error e_l is one draw of that noise and a tensor-core or another order's sum is
// another. kFloorRel (1e-6, ~8 fp32 units of rounding) of these magnitudes is that noise's size.
//
// Indexer scores (SPEC.md §3): I[g, t] = Σ_h w[g,h]·φ(q_I[g,h]·k_I[t]), often tens of times smaller
// than its terms. The magnitude is
//   M_I = max over visible pairs (g, t) of Σ_h |w[g,h]|·‖q_I[g,h]‖₂·‖k_I[t]‖₂,
// a bound (Cauchy–Schwarz) of Σ_h |w|·Σ_d |q_I·k_I|; still ~10^-4 of a typical score at kFloorRel:
// a wrong key, head or rounding shows far above it.
//
// KL rows (SPEC.md §7): KL[g] = Σ_t T·(log T − log Q) passes through Σ_t T·(|log T| + |log Q|)
// = 2·H(T) + KL[g] (log T, log Q ≤ 0), and H(T) ≤ ln n for a distribution over n keys:
//   M_KL = max over rows g of KL_exact[g] + 2·ln(n_g),  n_g = the keys row g sees.
// Near-equal T and Q make KL tiny while its terms are O(ln n).
//
// Indexer loss gradients (SPEC.md §7): dI[g, t] = coeff/N·(Q − T), with Q and T distributions over
// the row's keys, so Σ_t |dI| ≤ 2·coeff/N. Where Q ≈ T on every row (uniform rows, one key) each
// gradient is a cancellation left at fp32 noise of its terms (nightly seed 97, cases 44 and 1880:
// fused dw 3e-8, exact 9e-17). Through the chain rule, with |φ(u)| ≤ |u| ≤ ‖q_I[g,h]‖·‖k_I[t]‖:
//   dw[g, h]   = Σ_t dI·φ(u)          passes through  2·coeff/N · ‖q_I[g,h]‖ · max_t ‖k_I[t]‖
//   dq_I[g, h] = Σ_t dI·w·φ'(u)·k_I   passes through  2·coeff/N · |w[g,h]| · max_t ‖k_I[t]‖
//   dk_I[t]    gets from each row      at most         2·coeff/N · Σ_h |w[g,h]|·‖q_I[g,h]‖
// maxima over the rows g that see a key and their visible keys t (a key's sum over many rows is
// larger still: the floor is one row's share).
#pragma once

#include "core/inputs.hpp"
#include "core/layout.hpp"
#include "core/tensor.hpp"

namespace dsa {

// One pass over the visible pairs of layout L (rows and keys global), maxima over the rows g that
// see a key and their keys t: M_I (score), max ‖q_I[g,h]‖·‖k_I[t]‖ (q_k), max |w[g,h]|·‖k_I[t]‖
// (w_k) and max Σ_h |w[g,h]|·‖q_I[g,h]‖ (w_q). Non-finite inputs (poisoned pad keys) are left out;
// all 0 when no row sees a key.
struct IndexerMagnitudes {
  double score = 0, q_k = 0, w_k = 0, w_q = 0;
};
IndexerMagnitudes indexer_magnitudes(const Inputs& in, const StreamLayout& L);
// M_I alone.
double indexer_score_magnitude(const Inputs& in, const StreamLayout& L);

// M_KL of the exact KL rows [Tp] over layout L (non-finite rows left out).
double kl_magnitude(const TensorD& kl_exact, const StreamLayout& L);

// The loss gradients' magnitudes above, for coeff/N = coeff_over_N: 2·coeff/N times q_k, w_k, w_q.
struct LossGradMagnitudes {
  double dw = 0, dq_I = 0, dk_I = 0;
};
LossGradMagnitudes loss_grad_magnitudes(const IndexerMagnitudes& m, double coeff_over_N);

}  // namespace dsa
