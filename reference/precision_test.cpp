// The bf16 policy (SPEC.md §8) stays within the error its precision explains.
//
// Both runs consume the same bf16 inputs and the same top-k (the exact run's), so the difference
// comes from computation only. bf16 keeps 8 significant bits: one rounding moves a value by at most
// u = 2^-9 of itself. For each tensor X we test
//     max|X_bf16 − X_exact| ≤ c_X · 2^-8 · max|X_exact|
// with c_X = the number of bf16 rounding points on X's dependency chain (precision.hpp lists them):
// each contributes at most ½·2^-8 relative at unit first-order gain, so c_X leaves a factor 2 for
// the gains of softmax and the projections. Observed worst ratios are 0.9–1.7 · 2^-8 on these cases.
//
// lse has a sharper bound. It is fp32 over logits whose only bf16 rounding is Q~ (absorbed) or
// k_nope (explicit), so every logit moves by at most B = 2^-9 · s · Σ|a_i||b_i| over the rounded
// dot product, and log-sum-exp is 1-Lipschitz in the max norm: |Δlse| ≤ max B + fp32 rounding
// (1e-5 · (1 + |lse|)).
//
// Also: every bf16-policy output that §8 rounds to bf16 holds bf16 values, and lse, KL and the loss
// hold fp32 values.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "reference/core.hpp"
#include "reference/test_util.hpp"

namespace dsa {
namespace {

constexpr double kUlp = 1.0 / 256;  // 2^-8

// Rounding points on each tensor's chain (Q~ or k_nope/v, P, dO_lat, O_lat, dlogit, dQ~, du, output).
const std::map<std::string, double> kRoundings = {
    {"O_lat", 3},   // Q~, P, O_lat
    {"O", 4},       // + O
    {"dq_nope", 6}, // Q~, dO_lat, O_lat (in Δ), dlogit, dQ~, output
    {"dq_pe", 5},   // Q~, dO_lat, O_lat, dlogit, dQ~ (= output)
    {"dW_UK", 6},   // Q~, dO_lat, O_lat, dlogit, dQ~, output
    {"dW_UV", 4},   // Q~, P, O_lat, output
    {"dc", 6},      // Q~, P (in dV~), dO_lat, O_lat, dlogit, output
    {"dk_pe", 5},   // Q~, dO_lat, O_lat, dlogit, output
    {"dq_I", 3},    // Q~ (through the target T), du, output
    {"dk_I", 3},    // Q~, du, output
    {"dw", 2},      // Q~, output
    {"kl", 1},      // Q~ (through T); fp32 otherwise
    {"loss", 1},
};

bool is_bf16(double x) { return !std::isfinite(x) || x == test::to_bf16(x); }
bool is_fp32(double x) { return !std::isfinite(x) || x == double(float(x)); }

// max over (g, h, t ∈ S(g)) of 2^-9 · s · Σ|a||b| where a·b is the logit's rounded dot product.
double logit_rounding_bound(const Problem& p, const StreamLayout& L, const Inputs& in, const TensorI& idx) {
  const Dims& d = p.dims;
  double worst = 0;
  for (int64_t g = 0; g < L.tp; ++g)
    for (int64_t h = 0; h < d.H; ++h) {
      std::vector<double> qt(d.C, 0.0);
      for (int64_t c = 0; c < d.C; ++c)
        for (int64_t k = 0; k < d.Dn; ++k) qt[c] += in.q_nope.at(g, h, k) * in.W_UK.at(h, k, c);
      for (int64_t j = 0; j < idx.row_size(); ++j) {
        const int64_t t = idx.at(g, j);
        if (t < 0 || !L.visible(g, t)) continue;
        double acc = 0;
        if (p.path == Path::absorbed) {
          for (int64_t c = 0; c < d.C; ++c) acc += std::abs(qt[c] * in.c.at(t, c));
        } else {
          for (int64_t k = 0; k < d.Dn; ++k) {
            double kn = 0;
            for (int64_t c = 0; c < d.C; ++c) kn += in.W_UK.at(h, k, c) * in.c.at(t, c);
            acc += std::abs(in.q_nope.at(g, h, k) * kn);
          }
        }
        worst = std::max(worst, p.softmax_scale * acc / 512);
      }
    }
  return worst;
}

struct PrecCase {
  Path path;
  LossMode loss;
  uint64_t seed;
};

class Bf16Policy : public ::testing::TestWithParam<PrecCase> {};

TEST_P(Bf16Policy, StaysWithinTheErrorItsPrecisionExplains) {
  Dims d;
  d.H = 4, d.Dn = 16, d.R = 8, d.C = 64, d.Dv = 16, d.HI = 4, d.DI = 16;
  Problem p = test::small_problem({40, 23, 64}, d, 16);
  p.path = GetParam().path;
  p.loss = GetParam().loss;
  const StreamLayout L = test::layout_of(p);
  const Inputs in = test::random_inputs(d, L.tp, GetParam().seed);
  RunOptions opt;
  const Result exact = run_core(p, in, opt);
  opt.attention_indices = exact.topk;
  opt.precision = Precision::bf16;
  const Result low = run_core(p, in, opt);

  std::map<std::string, const TensorD*> ex;
  exact.for_each_float([&](const std::string& n, const TensorD& t) { ex[n] = &t; });
  int checked = 0;
  low.for_each_float([&](const std::string& n, const TensorD& t) {
    if (n == "lse") {
      const double B = logit_rounding_bound(p, L, in, exact.topk);
      EXPECT_GT(B, 0.0);
      for (int64_t i = 0; i < t.size(); ++i) {
        const double e = ex[n]->data[i];
        if (std::isinf(e)) {
          EXPECT_EQ(t.data[i], e);
          continue;
        }
        ASSERT_LE(std::abs(t.data[i] - e), B + 1e-5 * (1 + std::abs(e))) << "lse[" << i << "]";
      }
    } else {
      ASSERT_TRUE(kRoundings.count(n)) << n;
      EXPECT_TRUE(test::close(n, t, *ex[n], kRoundings.at(n) * kUlp)) << "c = " << kRoundings.at(n);
    }
    const bool fp32 = n == "lse" || n == "kl" || n == "loss";
    for (double x : t.data) {
      ASSERT_TRUE(fp32 ? is_fp32(x) : is_bf16(x)) << n << " holds " << x << ", not a " << (fp32 ? "fp32" : "bf16")
                                                  << " value";
    }
    ++checked;
  });
  EXPECT_EQ(checked, 14);
  // The policy does round: the runs differ (a bf16 run equal to the exact one would prove nothing).
  EXPECT_GT(std::abs(low.O.data[0] - exact.O.data[0]) + std::abs(low.dc.data[0] - exact.dc.data[0]), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Cases, Bf16Policy,
                         ::testing::Values(PrecCase{Path::absorbed, LossMode::sparse, 1},
                                           PrecCase{Path::absorbed, LossMode::dense, 2},
                                           PrecCase{Path::explicit_, LossMode::sparse, 3},
                                           PrecCase{Path::explicit_, LossMode::dense, 4}),
                         [](const auto& i) { return std::string(name(i.param.path)) + "_" + name(i.param.loss); });

}  // namespace
}  // namespace dsa
