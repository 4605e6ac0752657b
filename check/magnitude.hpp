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
#pragma once

#include "core/inputs.hpp"
#include "core/layout.hpp"
#include "core/tensor.hpp"

namespace dsa {

// M_I over the visible pairs of layout L (rows and keys global); non-finite inputs (poisoned pad
// keys) are left out. 0 when no row sees a key.
double indexer_score_magnitude(const Inputs& in, const StreamLayout& L);

// M_KL of the exact KL rows [Tp] over layout L (non-finite rows left out).
double kl_magnitude(const TensorD& kl_exact, const StreamLayout& L);

}  // namespace dsa
