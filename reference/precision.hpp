// Precision policies (SPEC.md §8). The core is written once over a policy: `Real` is the
// arithmetic type and `bf()` marks each point where the bf16 policy rounds to bf16 (a kernel
// boundary or a tensor-core operand). Under `exact` both are fp64 and bf() is the identity.
//
// Rounding points of the bf16 policy (the fused kernels round at the same places):
//   Q~ (GEMM output); P as the operand of P·V; O_lat and O on output; dO_lat = W_UVᵀ·dO (GEMM
//   output); dlogit as the operand of the dQ~ / dK~ products; dQ~ on output; du = dI·w·φ'(u) as
//   the operand of the dq_I / dk_I products; every gradient on output. Logits, scores, softmax,
//   lse, KL and the loss stay fp32; every sum accumulates in fp32.
#pragma once

#include <cmath>

#include <Eigen/Core>

#include "core/bf16.hpp"

namespace dsa {

// Elementary functions go through the policy: P::exp(array expression) elementwise.
//
// Exact means exact (SPEC.md §8): every exp of the exact policy is the scalar libm std::exp
// (glibc: correctly rounded to within 1 ulp over the whole range, underflow to 0 included), never
// Eigen's vectorized pexp, which clamps its argument at −709.78 and returns ~1e-308 where the true
// value underflows to 0 (a saturated softmax weight must be exactly 0). Logs are scalar std::log
// everywhere in the reference already.
struct ExactPolicy {
  using Real = double;
  static constexpr bool rounds = false;  // bf() is the identity: bf_inplace skips the pass
  static double bf(double x) { return x; }
  template <class A>
  static auto exp(const A& a) {
    return a.unaryExpr([](double x) { return std::exp(x); });
  }
};

// The bf16 policy emulates a fused kernel, whose exp is a fast fp32 approximation anyway: Eigen's
// vectorized float exp (unchanged, so lowp results stay bit-identical).
struct Bf16Policy {
  using Real = float;
  static constexpr bool rounds = true;
  static float bf(float x) { return round_bf16(x); }
  template <class A>
  static auto exp(const A& a) {
    return a.exp();
  }
};

// Applies P::bf to every element of an Eigen expression's storage, in place. Under the exact
// policy there is nothing to do, and a pass over a [Tq, H·C] matrix is not free.
template <class P, class M>
void bf_inplace(M&& m) {
  if constexpr (P::rounds) m = m.unaryExpr([](typename P::Real x) { return P::bf(x); });
}

}  // namespace dsa
