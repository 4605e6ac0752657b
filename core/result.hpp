// Every stage's output of one run (DESIGN.md "Result"), rows in global stream order.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/bands.hpp"
#include "core/tensor.hpp"

namespace dsa {

// The largest change a legal flip of φ'(u) can make to one element of dq_I or dk_I (SPEC.md §9).
// ReLU's φ' jumps at u = 0; where the exact |u| is within the fp32 rounding bound of its DI-term
// dot product (kink_band), a bf16-policy kernel may compute u ≤ 0 or u > 0, and either is right.
// Per element: the sum over such terms of |dI·w|·|the other factor|, the maximum over elements.
// Only the exact oracles fill it; the comparison adds it to the tensor's floor.
struct KinkSlack {
  double dq_I = 0, dk_I = 0;
};

// Δ = dO_lat·O_lat (SPEC.md §6; dO·O on the explicit path) is formed from O_lat rounded to bf16 on
// output, and O_lat from P rounded to bf16 before P·V (§8): a bf16-policy kernel's Δ is off from
// the exact one by up to delta_band = 2⁻⁹·(Σ_c |dO_lat_c·O_lat_c| + Σ_j P_j·|dP_j|). That one number
// moves a whole row: dQ~ shifts by s·δΔ·Σ_j P_j·K~_j, every element coherently, so it does not
// average out in the maximum the comparison takes, and a kernel that rounds P or O_lat at other
// (legal) points can land several of lowp's errors away from exact. Seen on the H100: nightly seed
// 105 case 1811, dq_nope 3.46× with the whole excess in Δ (the forward rounds the running, not the
// normalized, P). Per tensor: the largest such shift of one element (dq_nope through W_UK by
// Cauchy–Schwarz). Only the exact oracles fill it; the comparison adds it to the tensor's floor.
// The key rows take such shifts through dK~ = s·dSᵀ·Q~, summed over the (row, head) pairs that
// selected them: key t moves by up to Σ P·|s|·noise·|Q~| (Q~'s first C columns for dc, the rest for
// dk_pe; explicit dc through W_UK's column norms by Cauchy–Schwarz), with noise = delta_noise_band,
// the fp32 summation of dP and Δ, not the bf16 band: the bf16 band summed over a key's rows let
// mutant no_key_grad_reduce_scatter through in 5 more of 143 nightly cases (CPU oracle, seed 11;
// with the fp32 band 92 of 143 are caught, as with no key-side slack at all).
// Seen on the H100: nightly seed 109 case 2000, dk_pe 3.5× lowp's error on a key whose exact
// gradient vanishes (one-hot rows): a 2.0e-4 error, lowp's largest 7.5e-5, and a key-side slack
// of 0.22 there (the bf16 band's would have been 27.8).
struct DeltaSlack {
  double dq_nope = 0, dq_pe = 0;
  double dc = 0, dk_pe = 0;
};

struct Result {
  std::optional<TensorD> scores;  // [Tp, Tp] indexer scores, −inf where not visible (small cases only)
  TensorI topk;                   // [Tp, K'] indexer top-k, −1 for empty slots
  TensorD O;                      // [Tp, H, Dv]
  TensorD O_lat;                  // [Tp, H, C]
  TensorD lse;                    // [Tp, H] natural log; −inf for empty rows
  TensorD kl;                     // [Tp] per-row KL (0 when the loss is off or the row is not counted)
  TensorD loss;                   // [1]
  TensorD dq_nope, dq_pe, dW_UK, dW_UV, dc, dk_pe;  // attention backward (SPEC.md §6)
  TensorD dq_I, dk_I, dw;                           // indexer loss backward (SPEC.md §7)
  std::optional<KinkSlack> kink;                    // exact oracles only, with the loss backward and ReLU
  std::optional<DeltaSlack> delta;                  // exact oracles only, with the attention backward

  // The float-valued outputs by name, in a fixed order; empty tensors were not produced.
  void for_each_float(const std::function<void(const std::string&, const TensorD&)>& f) const;
  void for_each_float(const std::function<void(const std::string&, TensorD&)>& f);
};

// Backends fill their output buffers with all-one bytes (0xFF: a NaN in bf16, fp32 and fp64)
// before a run. An element that still holds that poison afterwards is stored as unwritten_value(),
// a NaN whose payload no arithmetic produces, so the comparison can say "unwritten", not just "nan".
inline constexpr uint64_t kUnwrittenBits = 0x7FF8DEADBEEF0001ull;  // a quiet NaN with a marked payload
double unwritten_value();
bool is_unwritten(double x);
// Whether raw output bits are the poison pattern.
inline bool is_poison_bits(uint16_t bf16_bits) { return bf16_bits == 0xFFFFu; }
inline bool is_poison_bits(uint32_t f32_bits) { return f32_bits == 0xFFFFFFFFu; }
inline bool is_poison_bits(uint64_t f64_bits) { return f64_bits == ~uint64_t{0}; }

}  // namespace dsa
