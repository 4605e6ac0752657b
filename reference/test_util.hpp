// Helpers of the reference tests: the shared test inputs (core/inputs_testing.hpp) and the exactness
// comparison of fp64 results against independent fp64 oracles (close, results_close).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/inputs.hpp"
#include "core/inputs_testing.hpp"
#include "core/layout.hpp"
#include "core/problem.hpp"
#include "core/result.hpp"

namespace dsa::test {

using test_inputs::input_sigma;
using test_inputs::layout_of;
using test_inputs::random_inputs;
using test_inputs::small_problem;
using test_inputs::tiny_dims;
inline double to_bf16(double x) { return test_inputs::normal_bf16(x); }

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

// ReLU's kink (SPEC.md §9, core/result.hpp KinkSlack): makes u = q_I[gi,h]·k_I[ti] = third² from
// the three nonzero terms s² (dim 0) − s² (dim DI/2) + third·third (dim DI − 1). With third = 2⁻¹⁵,
// u = 2⁻³⁰ is below the fp32 resolution of the sum: an fp32 kernel may compute 0 (φ' = 0) or 2⁻³⁰
// (φ' = 1) by its order. Sequential, lane-wise SIMD and halving-tree sums all cancel s² first (the
// bf16 reference gets 2⁻³⁰). third = 0 gives u = 0 exactly. s (a power of 2) sets the term's weight
// in the gradients. Rows gi and ti in the inputs' own order; DI ≥ 4.
inline void plant_kink(Inputs& in, int64_t gi, int64_t h, int64_t ti, double third, double s = 1.0) {
  const int64_t DI = in.k_I.dim(1);
  double* q = &in.q_I.at(gi, h, 0);
  double* k = in.k_I.row(ti);
  std::fill_n(q, DI, 0.0);
  std::fill_n(k, DI, 0.0);
  q[0] = q[DI / 2] = k[0] = s;
  k[DI / 2] = -s;
  q[DI - 1] = k[DI - 1] = third;
}

}  // namespace dsa::test
