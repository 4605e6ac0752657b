// Test inputs shared by the reference, check and fused tests: random bf16 inputs with O(1) logits
// and small problems. Header only, for tests (not installed).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "core/inputs.hpp"
#include "core/layout.hpp"
#include "core/problem.hpp"

namespace dsa::test_inputs {

// Standard deviation of each input so that every logit s·Q~·K~ and every indexer product
// q_I·k_I is O(1): Q~ = q_nope·W_UK has unit entries when W_UK ~ N(0, 1/Dn), K~ has unit entries,
// and s = 1/sqrt(C+R) (set by small_problem) normalizes the dot product.
inline double input_sigma(const std::string& name, const Dims& d) {
  if (name == "W_UK") return 1.0 / std::sqrt(double(d.Dn));
  if (name == "W_UV") return 1.0 / std::sqrt(double(d.C));
  if (name == "q_I") return 1.0 / std::sqrt(double(d.DI));
  return 1.0;
}

// A normal value rounded to bf16 through fp32 (the values these tests were written with).
inline double normal_bf16(double x) { return round_bf16(static_cast<float>(x)); }

// Normal values from std::mt19937_64, rounded once to bf16, stored as double (SPEC.md §8).
inline Inputs random_inputs(const Dims& d, int64_t tp, uint64_t seed) {
  Inputs in = zero_inputs(d, tp);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  in.for_each([&](const std::string& n, TensorD& t) {
    const double sigma = input_sigma(n, d);
    for (double& x : t.data) x = normal_bf16(sigma * normal(rng));
  });
  return in;
}

// Small dimensions: every test runs in milliseconds.
inline Dims tiny_dims() {
  Dims d;
  d.H = 2, d.Dn = 4, d.R = 4, d.C = 8, d.Dv = 4, d.HI = 2, d.DI = 4;
  return d;
}

inline Problem small_problem(std::vector<int64_t> seqlens, Dims d = tiny_dims(), int64_t topk = 4) {
  Problem p;
  p.seqlens = std::move(seqlens);
  p.dims = d;
  p.topk = topk;
  p.softmax_scale = 1.0 / std::sqrt(double(d.C + d.R));
  p.coeff = 0.7;  // not 1, so that a missing coeff shows
  return p;
}

inline StreamLayout layout_of(const Problem& p) { return make_layout(p.seqlens, p.cp, p.pad_rows); }

}  // namespace dsa::test_inputs
