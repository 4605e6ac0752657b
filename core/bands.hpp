// The rounding bands of SPEC.md §8–§9 that the exact oracles turn into slack (core/result.hpp's
// KinkSlack and DeltaSlack say what each slack covers). DSA_HD: the CPU reference and the GPU
// oracle's kernels evaluate the same expression.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace dsa {

// The band of |u| within which φ'(u) is ambiguous: 4·DI·2⁻²⁴·‖q_I‖·‖k_I‖ (Cauchy–Schwarz bounds
// Σ|q_i·k_i|; a DI-term fp32 sum is within (DI−1)·2⁻²⁴ of it, tensor-core accumulation a few times that).
inline double kink_band(int64_t DI, double q_norm, double k_norm) {
  return 4.0 * static_cast<double>(DI) * 0x1p-24 * q_norm * k_norm;
}

// How far a bf16-policy kernel's Δ may sit from the exact one: 2⁻⁹·(Σ_c |dO_lat_c·O_lat_c| + Σ_j P_j·|dP_j|).
// R: the GPU oracle runs it in its own precision; a power-of-two scale keeps it exact in either.
template <class R>
DSA_HD inline R delta_band(R abs_dO_O, R abs_P_dP) {
  return R(0x1p-9) * (abs_dO_O + abs_P_dP);
}

// How far a kernel's dP − Δ may sit from the exact one from fp32 summation alone: dP and Δ are
// width-term dot products that it may sum in different orders (4·width·2⁻²⁴ of the absolute terms,
// as kink_band). Where P is one-hot the exact dS = P·(dP − Δ) is 0 and so is lowp's (the oracles
// form both from one sum there), while a kernel's keeps that noise.
template <class R>
DSA_HD inline R delta_noise_band(int64_t width, R abs_dO_O, R abs_P_dP) {
  return R(4) * R(width) * R(0x1p-24) * (abs_dO_O + abs_P_dP);
}

}  // namespace dsa
