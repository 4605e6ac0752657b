#include "harness/shrink.hpp"

#include <algorithm>

#include <gtest/gtest.h>

#include "reference/core.hpp"
#include "core/errors.hpp"
#include "core/layout.hpp"

namespace dsa {
namespace {

// The exact reference with a planted bug of known extent: O is wrong at every real row at
// position >= 2 when there are at least 2 heads. The smallest failing case is one sequence of
// length 3 with H = 2.
class BuggyBackend : public Backend {
 public:
  int runs = 0;
  std::string name() const override { return "test:buggy"; }
  BackendRun run(const Case& c, const PreparedCase& pc) override {
    const Inputs& in = pc.inputs;
    const std::optional<TensorI>& injected = pc.injected;
    ++runs;
    RunOptions o;
    o.attention_indices = injected;
    BackendRun r;
    r.result = run_core(c.problem, in, o);
    const StreamLayout L = make_layout(c.problem.seqlens, c.problem.cp, c.problem.pad_rows);
    if (c.problem.dims.H >= 2)
      for (int64_t g = 0; g < L.tp; ++g)
        if (L.is_real(g) && L.pos(g) >= 2) r.result.O.at(g, 1, 0) += 1.0;
    return r;
  }
};

// Throws on every run: a crash bucket.
class CrashingBackend : public Backend {
 public:
  std::string name() const override { return "test:crash"; }
  BackendRun run(const Case& c, const PreparedCase&) override {
    if (c.problem.dims.C >= 4) throw std::runtime_error("kernel launch failed: C too large");
    return {};
  }
};

Case big_case() {
  Case c;
  c.seed = 11;
  c.problem.seqlens = {7, 0, 13, 5};
  c.problem.cp = {2, Layout::contiguous, 0};
  c.problem.dims = {4, 8, 4, 16, 8, 2, 8};
  c.problem.topk = 6;
  c.problem.loss = LossMode::dense;
  c.problem.path = Path::explicit_;
  c.problem.pad_rows = PadRows::masked;
  c.init.score_ties = true;
  c.init.zero_rows = true;
  c.init.inject_indices = true;
  c.init.poison_pad_keys = true;
  return c;
}

TEST(Shrink, CandidatesAreValidAndSimpler) {
  const Case c = big_case();
  const auto cands = shrink_candidates(c, Stage::attention);
  ASSERT_FALSE(cands.empty());
  bool one_stage = false, cp1 = false, no_inject = false, no_masked = false, h1 = false;
  for (const Case& x : cands) {
    EXPECT_NO_THROW(validate(x.problem));
    EXPECT_NO_THROW(make_layout(x.problem.seqlens, x.problem.cp, x.problem.pad_rows));
    EXPECT_LE(case_weight(x), case_weight(c));
    EXPECT_FALSE(!x.problem.seqlens.empty() && x.init.poison_pad_keys && x.problem.pad_rows != PadRows::masked);
    one_stage |= x.stages == std::vector<Stage>{Stage::attention};
    cp1 |= x.problem.cp.size == 1;
    no_inject |= !x.init.inject_indices;
    no_masked |= x.problem.pad_rows == PadRows::attend;
    h1 |= x.problem.dims.H == 1;
  }
  EXPECT_TRUE(one_stage && cp1 && no_inject && no_masked && h1);
  // A failure in the loss never drops the loss.
  for (const Case& x : shrink_candidates(c, Stage::loss)) EXPECT_NE(x.problem.loss, LossMode::off);
}

TEST(Shrink, ReducesToTheSmallestFailingCaseAndKeepsTheFailure) {
  BuggyBackend b;
  Case c = big_case();
  c.init.inject_indices = false;  // the bug is in O whatever the indices
  CaseVerdict v = run_case(c, b);
  ASSERT_TRUE(v.failed()) << v.message;
  ASSERT_EQ(v.tensor, "O");
  ShrinkResult s = shrink_case(c, v, b, {30, 400});
  EXPECT_TRUE(s.verdict.has_failure("attention", "O", Failure::mismatch));
  EXPECT_EQ(s.shrunk.problem.seqlens, (std::vector<int64_t>{3}));
  EXPECT_EQ(s.shrunk.problem.dims.H, 2);
  EXPECT_EQ(s.shrunk.problem.cp.size, 1);
  EXPECT_EQ(s.shrunk.stages, std::vector<Stage>{Stage::attention});
  EXPECT_FALSE(s.shrunk.init.score_ties || s.shrunk.init.zero_rows || s.shrunk.init.poison_pad_keys);
  EXPECT_EQ(s.shrunk.problem.dims.C, 1);
  EXPECT_EQ(s.shrunk.problem.topk, 1);
  EXPECT_GT(s.accepted, 5);
  EXPECT_EQ(s.runs, b.runs - 1);
  // The shrunk case fails on its own.
  EXPECT_TRUE(run_case(s.shrunk, b).has_failure("attention", "O", Failure::mismatch));
}

TEST(Shrink, IsBoundedByItsRunBudget) {
  BuggyBackend b;
  Case c = big_case();
  c.init.inject_indices = false;
  CaseVerdict v = run_case(c, b);
  ShrinkResult s = shrink_case(c, v, b, {30, 3});
  EXPECT_EQ(s.runs, 3);
}

TEST(Shrink, KeepsACrashACrash) {
  CrashingBackend b;
  Case c = big_case();
  CaseVerdict v = run_case(c, b);
  ASSERT_EQ(v.failure, Failure::crash);
  EXPECT_EQ(v.bucket, "test:crash/run/-/crash") << v.bucket;
  ShrinkResult s = shrink_case(c, v, b, {30, 400});
  EXPECT_EQ(s.shrunk.problem.dims.C, 4);  // C = 2 would stop the crash
  EXPECT_EQ(s.shrunk.problem.seqlens.size(), 1u);
  EXPECT_EQ(s.verdict.failure, Failure::crash);
}

TEST(Shrink, PassingCaseIsReturnedUnchanged) {
  BuggyBackend b;
  Case c = big_case();
  c.problem.dims.H = 1;  // the bug needs two heads
  c.init.inject_indices = false;
  CaseVerdict v = run_case(c, b);
  ASSERT_EQ(v.verdict, Verdict::pass) << v.message;
  ShrinkResult s = shrink_case(c, v, b);
  EXPECT_EQ(s.runs, 0);
  EXPECT_EQ(s.shrunk.problem.seqlens, c.problem.seqlens);
}

}  // namespace
}  // namespace dsa
