// The size of what the indexer's sums pass through (SPEC.md §3), the scale of the score
// tolerance's floor. I[g, t] = Σ_h w[g,h]·φ(q_I[g,h]·k_I[t]) often cancels: terms tens of times
// larger than the score. Any fp32 summation order is then off by about an fp32 ulp of the terms,
// which a floor relative to the largest |I| cannot see (its lowp error e_l is one draw of that
// noise, and a tensor-core sum is a different draw). The floor is relative to
//   M = max over visible pairs (g, t) of Σ_h |w[g,h]|·‖q_I[g,h]‖₂·‖k_I[t]‖₂,
// a bound (Cauchy–Schwarz) of Σ_h |w|·Σ_d |q_I·k_I|, the magnitude fp32 rounding scales with.
// kFloorRel·M is still ~10^-4 of a typical score: a wrong key, head or rounding shows far above.
#pragma once

#include "core/inputs.hpp"
#include "core/layout.hpp"

namespace dsa {

// M above over the visible pairs of layout L (rows and keys global); non-finite inputs (poisoned
// pad keys) are left out. 0 when no row sees a key.
double indexer_score_magnitude(const Inputs& in, const StreamLayout& L);

}  // namespace dsa
