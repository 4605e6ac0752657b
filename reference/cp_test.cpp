// CP-sharded execution (rank by rank, in-process communicator) equals global execution
// (SPEC.md §1, §7): for cp ∈ {1, 2, 3, 4, 8}, both layouts, both pad policies, with lengths 0, 1,
// primes, lengths not divisible by 2·cp and shorter than K. Every output and gradient is compared
// in global rows; top-k exactly, floats to 1e-12 · max|X| (the ranks sum key gradients, weight
// gradients and the loss in another order than the global run: fp64 rounding only).
#include <gtest/gtest.h>

#include "reference/core.hpp"
#include "reference/test_util.hpp"

namespace dsa {
namespace {
namespace cp_test {  // its own names in a unity build (README "Layout of the source")

constexpr double kRel = 1e-12;

struct CpCase {
  int64_t cp;
  Layout layout;
  PadRows pad;
};

class Sharded : public ::testing::TestWithParam<CpCase> {};

TEST_P(Sharded, EqualsGlobal) {
  const CpCase& c = GetParam();
  // 0 and 1, primes, none divisible by 2·cp for cp > 1, several shorter than K = 6.
  Problem p = test::small_problem({0, 1, 7, 2, 13, 5}, test::tiny_dims(), 6);
  p.cp.size = c.cp;
  p.cp.layout = c.layout;
  p.pad_rows = c.pad;
  // Cover both loss supports and both paths across the grid without doubling its cost.
  p.loss = (c.cp % 2) ? LossMode::sparse : LossMode::dense;
  p.path = (c.cp == 3 || c.cp == 8) ? Path::explicit_ : Path::absorbed;
  const StreamLayout L = test::layout_of(p);
  const Inputs in = test::random_inputs(p.dims, L.tp, 1000 + c.cp);
  RunOptions opt;
  opt.kl_chunk_rows = 3;
  const Result global = run_core(p, in, opt);
  const Result sharded = run_core_sharded(p, in, opt);
  EXPECT_EQ(sharded.topk.shape, global.topk.shape);
  EXPECT_EQ(sharded.topk.data, global.topk.data);
  ASSERT_TRUE(sharded.scores.has_value() && global.scores.has_value());
  EXPECT_TRUE(test::close("scores", *sharded.scores, *global.scores, kRel));
  EXPECT_TRUE(test::results_close(sharded, global, kRel));
  EXPECT_GT(global.loss.data[0], 0.0);
  EXPECT_GT(test::max_abs(global.dc), 0.0);

  // The same with an injected index set (stage-decoupled comparison, SPEC.md §9).
  RunOptions inj = opt;
  inj.attention_indices = global.topk;
  for (int64_t g = 0; g < L.tp; g += 3) inj.attention_indices->row(g)[0] = -1;
  EXPECT_TRUE(test::results_close(run_core_sharded(p, in, inj), run_core(p, in, inj), kRel));
}

std::vector<CpCase> grid() {
  std::vector<CpCase> out;
  for (int64_t cp : {1, 2, 3, 4, 8})
    for (Layout l : {Layout::zigzag, Layout::contiguous})
      for (PadRows pr : {PadRows::attend, PadRows::masked}) out.push_back({cp, l, pr});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Grid, Sharded, ::testing::ValuesIn(grid()), [](const auto& i) {
  return "cp" + std::to_string(i.param.cp) + "_" + name(i.param.layout) + "_" + name(i.param.pad);
});

// The lowp backend runs the bf16 policy rank by rank. Query-side rows see the same all-gathered
// keys, so only the order of cross-rank sums (key and weight gradients, the loss) differs: fp32
// rounding before the final bf16 rounding, which can then flip by at most one bf16 spacing,
// 2^-7·|x| ≤ 2^-7·max|X|.
TEST(Sharded, Bf16PolicyEqualsGlobalUpToOneRounding) {
  for (int64_t cp : {2, 3, 4})
    for (Layout l : {Layout::zigzag, Layout::contiguous}) {
      Problem p = test::small_problem({0, 1, 7, 2, 13, 5}, test::tiny_dims(), 6);
      p.cp.size = cp, p.cp.layout = l;
      const StreamLayout L = test::layout_of(p);
      const Inputs in = test::random_inputs(p.dims, L.tp, 2000 + cp);
      RunOptions opt;
      opt.precision = Precision::bf16;
      const Result global = run_core(p, in, opt), sharded = run_core_sharded(p, in, opt);
      EXPECT_EQ(sharded.topk.data, global.topk.data);
      EXPECT_TRUE(test::results_close(sharded, global, 1.0 / 128)) << "cp " << cp << " " << name(l);
      // Query side: the same row computations on the same operands, bit for bit.
      for (auto [n, a, b] : {std::tuple{"O", &sharded.O, &global.O}, {"lse", &sharded.lse, &global.lse},
                             {"dq_nope", &sharded.dq_nope, &global.dq_nope}, {"dq_pe", &sharded.dq_pe, &global.dq_pe}})
        EXPECT_TRUE(test::close(n, *a, *b, 0.0)) << "cp " << cp << " " << name(l);
    }
}

// Contiguous with a pad_multiple leaves a trailing pad segment; zigzag with a larger multiple.
TEST(Sharded, NonDefaultPadMultiples) {
  for (Layout l : {Layout::zigzag, Layout::contiguous}) {
    Problem p = test::small_problem({3, 8}, test::tiny_dims(), 5);
    p.cp.size = 2, p.cp.layout = l, p.cp.pad_multiple = l == Layout::zigzag ? 8 : 3;
    const StreamLayout L = test::layout_of(p);
    EXPECT_EQ(L.tp, l == Layout::zigzag ? 16 : 12);
    const Inputs in = test::random_inputs(p.dims, L.tp, 5);
    EXPECT_TRUE(test::results_close(run_core_sharded(p, in, {}), run_core(p, in, {}), kRel)) << name(l);
  }
}

// The kink slack (core/result.hpp) is a property of the case: the ranks' sums and maxima give the
// single process's value, with a planted u = 2⁻³⁰ whose key lies on another rank than its row.
TEST(Sharded, KinkSlackEqualsGlobal) {
  for (Layout l : {Layout::zigzag, Layout::contiguous}) {
    Problem p = test::small_problem({9, 23}, test::tiny_dims(), 5);
    p.cp.size = 2, p.cp.layout = l, p.loss = LossMode::dense;
    const StreamLayout L = test::layout_of(p);
    Inputs in = test::random_inputs(p.dims, L.tp, 5);
    test::plant_kink(in, L.cu[1] + 20, 0, L.cu[1] + 1, 0x1p-15, 4.0);
    const Result global = run_core(p, in, {}), sharded = run_core_sharded(p, in, {});
    ASSERT_TRUE(global.kink && sharded.kink);
    EXPECT_GT(global.kink->dq_I, 0);
    EXPECT_NEAR(sharded.kink->dq_I, global.kink->dq_I, 1e-12 * global.kink->dq_I) << name(l);
    EXPECT_NEAR(sharded.kink->dk_I, global.kink->dk_I, 1e-12 * global.kink->dk_I) << name(l);
  }
}

// The Δ slack (core/result.hpp DeltaSlack) likewise: the largest over the ranks' rows is the single
// process's, on both paths.
TEST(Sharded, DeltaSlackEqualsGlobal) {
  for (Path path : {Path::absorbed, Path::explicit_})
    for (Layout l : {Layout::zigzag, Layout::contiguous}) {
      Problem p = test::small_problem({9, 23}, test::tiny_dims(), 5);
      p.cp.size = 2, p.cp.layout = l, p.path = path;
      const StreamLayout L = test::layout_of(p);
      const Inputs in = test::random_inputs(p.dims, L.tp, 5);
      const Result global = run_core(p, in, {}), sharded = run_core_sharded(p, in, {});
      ASSERT_TRUE(global.delta && sharded.delta);
      EXPECT_GT(global.delta->dq_nope, 0);
      EXPECT_GT(global.delta->dq_pe, 0);
      EXPECT_NEAR(sharded.delta->dq_nope, global.delta->dq_nope, 1e-12 * global.delta->dq_nope) << name(l);
      EXPECT_NEAR(sharded.delta->dq_pe, global.delta->dq_pe, 1e-12 * global.delta->dq_pe) << name(l);
      // The key side sums over the ranks' rows: each key's sum, then the largest.
      EXPECT_GT(global.delta->dc, 0);
      EXPECT_GT(global.delta->dk_pe, 0);
      EXPECT_NEAR(sharded.delta->dc, global.delta->dc, 1e-12 * global.delta->dc) << name(l);
      EXPECT_NEAR(sharded.delta->dk_pe, global.delta->dk_pe, 1e-12 * global.delta->dk_pe) << name(l);
    }
}

}  // namespace cp_test
}  // namespace
}  // namespace dsa
