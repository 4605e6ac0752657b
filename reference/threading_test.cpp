// The threaded reference (OpenMP over query rows and heads, reference/rank.hpp) on a case above
// its threading threshold, several backward row blocks long:
//   * the thread count changes no query-side value (each row and each head is computed by one
//     thread, with serial GEMMs) and no weight gradient (summed over fixed row blocks), bit for bit;
//     the key-side gradients are per-thread partials summed in thread order: 1e-12 · max|X|;
//   * the absorbed path equals the explicit one (1e-12 · max|X|), as in equivalence_test.cpp.
#include <gtest/gtest.h>
#include <omp.h>

#include "reference/core.hpp"
#include "reference/test_util.hpp"

namespace dsa {
namespace {

constexpr double kRel = 1e-12;

class Threading : public ::testing::Test {
 protected:
  void SetUp() override {
    threads_ = omp_get_max_threads();
    Dims d;
    d.H = 8, d.Dn = 16, d.R = 16, d.C = 64, d.Dv = 16, d.HI = 8, d.DI = 32;
    p = test::small_problem({299, 211}, d, 256);  // zigzag pads each to even: one masked pad row each
    p.pad_rows = PadRows::masked;
    L = test::layout_of(p);
    in = test::random_inputs(d, L.tp, 4242);
    // Rank's threading threshold (multiply-adds of the attention and the indexer): this case is above it.
    const double work = double(L.tp) * double(std::min(L.tp, p.topk)) * d.H * (d.C + d.R) +
                        double(L.tp) * double(L.tp) * d.HI * d.DI;
    EXPECT_GE(work, 1e8);
    EXPECT_GT(L.tp, 3 * 128);  // several backward blocks
  }
  void TearDown() override { omp_set_num_threads(threads_); }
  Result run(int threads, Precision precision = Precision::exact) {
    omp_set_num_threads(threads);
    RunOptions opt;
    opt.precision = precision;
    return run_core(p, in, opt);
  }
  Problem p;
  StreamLayout L;
  Inputs in;
  int threads_ = 1;
};

void expect_query_side_identical(const Result& a, const Result& b, int threads) {
  EXPECT_EQ(a.topk.data, b.topk.data) << threads;
  for (auto [n, x, y] : {std::tuple{"O", &a.O, &b.O}, {"O_lat", &a.O_lat, &b.O_lat}, {"lse", &a.lse, &b.lse},
                         {"kl", &a.kl, &b.kl}, {"dq_nope", &a.dq_nope, &b.dq_nope}, {"dq_pe", &a.dq_pe, &b.dq_pe},
                         {"dq_I", &a.dq_I, &b.dq_I}, {"dw", &a.dw, &b.dw}, {"dW_UK", &a.dW_UK, &b.dW_UK},
                         {"dW_UV", &a.dW_UV, &b.dW_UV}})
    EXPECT_TRUE(test::close(n, *x, *y, 0.0)) << threads << " threads";
}

TEST_F(Threading, ThreadCountChangesNoQuerySideValue) {
  const Result one = run(1);
  EXPECT_GT(test::max_abs(one.dW_UK), 0.0);
  for (int threads : {2, 3}) {
    const Result r = run(threads);
    expect_query_side_identical(r, one, threads);
    EXPECT_TRUE(test::results_close(r, one, kRel)) << threads << " threads";
  }
}

// The bf16 policy: the same for its query side; its key-side sums in fp32 may then round to a
// neighbouring bf16 value (one spacing, 2^-7·max|X|), as across CP ranks (cp_test.cpp).
TEST_F(Threading, ThreadCountChangesNoQuerySideValueBf16) {
  const Result one = run(1, Precision::bf16);
  for (int threads : {2, 3}) {
    const Result r = run(threads, Precision::bf16);
    expect_query_side_identical(r, one, threads);
    EXPECT_TRUE(test::results_close(r, one, 1.0 / 128)) << threads << " threads";
  }
}

TEST_F(Threading, AbsorbedEqualsExplicit) {
  omp_set_num_threads(2);
  p.path = Path::absorbed;
  const Result a = run_core(p, in, {});
  p.path = Path::explicit_;
  const Result e = run_core(p, in, {});
  EXPECT_EQ(a.topk.data, e.topk.data);
  EXPECT_TRUE(test::results_close(a, e, kRel));
}

}  // namespace
}  // namespace dsa
