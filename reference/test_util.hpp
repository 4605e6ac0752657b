// Helpers shared by the reference tests: random bf16 inputs with O(1) logits, small problems, and
// the one comparison routine every test uses.
#pragma once

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/inputs.hpp"
#include "core/layout.hpp"
#include "core/problem.hpp"
#include "core/result.hpp"

namespace dsa::test {

inline double to_bf16(double x) { return static_cast<double>(static_cast<float>(Eigen::bfloat16(static_cast<float>(x)))); }

// Standard deviation of each input so that every logit s·Q~·K~ and every indexer product
// q_I·k_I is O(1): Q~ = q_nope·W_UK has unit entries when W_UK ~ N(0, 1/Dn), K~ has unit entries,
// and s = 1/sqrt(C+R) (set by small_problem) normalizes the dot product.
inline double input_sigma(const std::string& name, const Dims& d) {
  if (name == "W_UK") return 1.0 / std::sqrt(double(d.Dn));
  if (name == "W_UV") return 1.0 / std::sqrt(double(d.C));
  if (name == "q_I") return 1.0 / std::sqrt(double(d.DI));
  return 1.0;
}

// Normal values from std::mt19937_64, rounded once to bf16, stored as double (SPEC.md §8).
inline Inputs random_inputs(const Dims& d, int64_t tp, uint64_t seed) {
  Inputs in = zero_inputs(d, tp);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  in.for_each([&](const std::string& n, TensorD& t) {
    const double sigma = input_sigma(n, d);
    for (double& x : t.data) x = to_bf16(sigma * normal(rng));
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

inline double max_abs(const TensorD& t) {
  double m = 0;
  for (double x : t.data)
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return m;
}

// The one comparison: same shape, ±inf and NaN at the same positions, and
// max|a − b| ≤ rel · max|b| + abs over the finite elements.
inline ::testing::AssertionResult close(const std::string& what, const TensorD& a, const TensorD& b, double rel,
                                        double abs = 0.0) {
  if (a.shape != b.shape)
    return ::testing::AssertionFailure() << what << ": shape " << shape_str(a.shape) << " vs " << shape_str(b.shape);
  const double bound = rel * max_abs(b) + abs;
  double worst = 0;
  int64_t at = -1;
  for (int64_t i = 0; i < a.size(); ++i) {
    const double x = a.data[i], y = b.data[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y))
        return ::testing::AssertionFailure() << what << "[" << i << "]: " << x << " vs " << y << " (NaN pattern)";
      continue;
    }
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return ::testing::AssertionFailure() << what << "[" << i << "]: " << x << " vs " << y << " (inf pattern)";
      continue;
    }
    if (std::abs(x - y) > worst) worst = std::abs(x - y), at = i;
  }
  if (worst <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": max|diff| " << worst << " at [" << at << "] (" << a.data[at]
                                       << " vs " << b.data[at] << ") > bound " << bound << " (rel " << rel
                                       << " · max " << max_abs(b) << " + abs " << abs << ")";
}

// Every float output of two results, each against rel · max|b| (+ abs).
inline ::testing::AssertionResult results_close(const Result& a, const Result& b, double rel, double abs = 0.0) {
  std::vector<std::pair<std::string, const TensorD*>> bs;
  b.for_each_float([&](const std::string& n, const TensorD& t) { bs.push_back({n, &t}); });
  size_t i = 0;
  ::testing::AssertionResult r = ::testing::AssertionSuccess();
  a.for_each_float([&](const std::string& n, const TensorD& t) {
    if (r) r = close(n, t, *bs[i].second, rel, abs);
    ++i;
  });
  return r;
}

// A random tensor of the given shape for perturbations and dO.
inline TensorD random_tensor(Shape s, uint64_t seed, double sigma = 1.0) {
  TensorD t(std::move(s));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, sigma);
  for (double& x : t.data) x = to_bf16(normal(rng));
  return t;
}

}  // namespace dsa::test
