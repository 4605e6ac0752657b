// Exact means exact (SPEC.md §8): the exact policy's exp is correctly rounded over its whole range,
// underflow to 0 included. Eigen's vectorized exp clamps its argument at −709.78 and returns
// ~1e-308 below it; a saturated softmax weight must be exactly 0, so that its dlogit and the
// query gradient of a saturated row are exactly 0 too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "reference/core.hpp"
#include "reference/precision.hpp"

namespace dsa {
namespace {

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(ExactPolicy, ExpIsLibmOverTheWholeRange) {
  // 16 elements: a whole number of packets, so a vectorized exp would take every one of them.
  Eigen::ArrayXd x(16);
  x << -745.2, -708, -709.9, -744.4, -1e7, -800, -0.5, 0, 1, 700, 709.7, -1e-300, -20, -300, -709.78, -709.79;
  const Eigen::ArrayXd y = ExactPolicy::exp(x);
  for (int i = 0; i < x.size(); ++i) EXPECT_TRUE(same_bits(y(i), std::exp(x(i)))) << x(i) << ": " << y(i);
  EXPECT_EQ(y(0), 0.0);                   // e^−745.2 underflows to 0
  EXPECT_EQ(y(4), 0.0);
  EXPECT_EQ(y(1), std::exp(-708.0));      // the libm value, a normal number
  EXPECT_GT(y(1), 3e-308);
  EXPECT_LT(y(1), 4e-308);
  EXPECT_GT(y(2), 0.0);                   // e^−709.9 is subnormal, not clamped
  EXPECT_LT(y(2), std::numeric_limits<double>::min());
  EXPECT_GT(y(3), 0.0);                   // e^−744.4 ≈ 1e-323: among the last subnormals
}

// One sequence of 32 tokens, every width 1: row 31 puts logit +1e6 on key 31 and −1e6 on keys
// 0 … 30, whose exact weights are e^−2e6 = 0. Then dlogit = P·(dP − δ) is exactly 0 on every key
// (P = 0 on keys 0 … 30; P = 1 and δ = dP on key 31) and so are dq_nope and dq_pe of row 31.
// A clamped exp gives P ≈ 1e-308 and dq ≈ 1e-302 there.
TEST(ExactPolicy, SaturatedSoftmaxWeightIsExactlyZero) {
  Problem p;
  p.seqlens = {32};
  p.dims = {1, 1, 1, 1, 1, 1, 1};
  p.topk = 32;
  p.softmax_scale = 0.5;
  p.loss = LossMode::off;
  const int64_t tp = 32;
  Inputs in = zero_inputs(p.dims, tp);
  for (int64_t g = 0; g < tp; ++g) {
    in.q_nope.data[g] = 1000;
    in.q_pe.data[g] = 1000;
    const double k = g == tp - 1 ? 1000 : -1000;
    in.c.data[g] = k;
    in.k_pe.data[g] = k;
    in.q_I.data[g] = 1;
    in.k_I.data[g] = 1;
    in.w.data[g] = 1;
    in.dO.data[g] = g % 2 ? 1 : -2;
  }
  in.W_UK.data[0] = 1;
  in.W_UV.data[0] = 1;
  RunOptions opt;
  opt.precision = Precision::exact;
  const Result r = run_core(p, in, opt);
  EXPECT_EQ(r.lse.data[tp - 1], 1e6);
  EXPECT_TRUE(same_bits(r.dq_nope.data[tp - 1], 0.0)) << r.dq_nope.data[tp - 1];
  EXPECT_TRUE(same_bits(r.dq_pe.data[tp - 1], 0.0)) << r.dq_pe.data[tp - 1];
  EXPECT_EQ(r.O_lat.data[tp - 1], 1000.0);  // P = (0, …, 0, 1): exactly c[31]
}

}  // namespace
}  // namespace dsa
