// --repeat (check/repeats.hpp): later runs of a backend held against the first. A tensor declared
// deterministic that changes one bit fails; an undeclared one may move within its tolerance and
// fails beyond it; the primary failure and the verdict follow; a run that drops a tensor fails.
// A later run that selects other keys (a backend that does not claim the top-k) is judged on its
// own: a legal one passes though every tensor after the indexer moved, an illegal one fails.
#include "check/repeats.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "check/prepared_testing.hpp"
#include "reference/core.hpp"

namespace dsa {
namespace {
namespace repeats_test {  // its own names in a unity build (README "Layout of the source")

PreparedCase small_case() { return test::small_case({7, 6}, 4, 3); }

struct Judged {
  PreparedCase c = small_case();
  Result first;
  CaseVerdict v;
  Judged() {
    RunOptions opt;
    opt.precision = Precision::bf16;
    first = run_core(c.problem, c.inputs, opt);
    auto oracle = make_cpu_oracle();
    v = judge(c, first, *oracle);
  }
};

const TensorCheck& check_of(const CaseVerdict& v, const std::string& t) {
  for (auto& ch : v.checks)
    if (ch.tensor == t) return ch;
  throw std::runtime_error("no check of " + t);
}

std::vector<std::string> all_but(const std::string& t) {
  std::vector<std::string> out;
  for (const TensorSpec* s : result_specs())
    if (s->name != t) out.emplace_back(s->name);
  return out;
}

TEST(Repeats, IdenticalRunsPassWithZeroSpread) {
  Judged j;
  ASSERT_EQ(j.v.verdict, Verdict::pass) << j.v.message;
  check_repeat(j.v, j.first, j.first, all_but(""));
  check_repeat(j.v, j.first, j.first, all_but(""));
  EXPECT_EQ(j.v.verdict, Verdict::pass) << j.v.message;
  const TensorCheck& o = check_of(j.v, "O");
  ASSERT_TRUE(o.repeat);
  EXPECT_EQ(o.repeat->runs, 3);
  EXPECT_TRUE(o.repeat->deterministic);
  EXPECT_EQ(o.repeat->differing, 0);
  EXPECT_EQ(o.repeat->spread, 0);
}

TEST(Repeats, OneFlippedBitOfADeterministicTensorFails) {
  Judged j;
  Result again = j.first;
  uint64_t bits;
  std::memcpy(&bits, &again.lse.data[5], 8);
  bits ^= 1;  // one ulp of fp64: far below any tolerance, but not the same bits
  std::memcpy(&again.lse.data[5], &bits, 8);
  check_repeat(j.v, j.first, again, all_but(""));
  EXPECT_EQ(j.v.verdict, Verdict::fail);
  EXPECT_EQ(j.v.tensor, "lse");
  EXPECT_EQ(j.v.failure, Failure::nondeterministic);
  EXPECT_NE(j.v.message.find("declared deterministic"), std::string::npos) << j.v.message;
  EXPECT_EQ(check_of(j.v, "lse").repeat->differing, 1);
  EXPECT_FALSE(check_of(j.v, "O").failed());
}

TEST(Repeats, AnUndeclaredTensorMayMoveWithinItsTolerance) {
  Judged j;
  const TensorCheck dc = check_of(j.v, "dc");
  const double tolerance = dc.alpha * dc.e_l + dc.floor;
  ASSERT_GT(tolerance, 0);
  Result small = j.first, big = j.first;
  small.dc.data[2] += 0.5 * tolerance;
  check_repeat(j.v, j.first, small, all_but("dc"));
  EXPECT_EQ(j.v.verdict, Verdict::pass) << j.v.message;
  EXPECT_NEAR(check_of(j.v, "dc").repeat->spread_ratio, 0.5, 1e-6);
  EXPECT_FALSE(check_of(j.v, "dc").repeat->deterministic);
  big.dc.data[2] += 1.5 * tolerance;
  check_repeat(j.v, j.first, big, all_but("dc"));
  EXPECT_EQ(j.v.verdict, Verdict::fail);
  EXPECT_EQ(j.v.tensor, "dc");
  EXPECT_EQ(j.v.failure, Failure::nondeterministic);
  EXPECT_NE(j.v.message.find("exceeds the tolerance"), std::string::npos) << j.v.message;
  EXPECT_EQ(check_of(j.v, "dc").repeat->runs, 3);
}

TEST(Repeats, ARunThatDropsATensorFails) {
  Judged j;
  Result again = j.first;
  again.dk_I = TensorD();
  check_repeat(j.v, j.first, again, {});
  EXPECT_EQ(j.v.verdict, Verdict::fail);
  EXPECT_EQ(j.v.tensor, "dk_I");
  EXPECT_NE(j.v.message.find("left the tensor out"), std::string::npos) << j.v.message;
}

// A case whose row g scores every visible key exactly 0 (an all-zero q_I row, SPEC.md §3), so any
// of its visible keys is a legal selection, and a row with more visible keys than slots.
struct Tied {
  PreparedCase c;
  int64_t g = -1;
  Tied() {
    const PreparedCase base = small_case();
    for (int64_t r = 0; r < base.layout.tp && g < 0; ++r)
      if (base.layout.key_end(r) - base.layout.key_begin(r) > base.width) g = r;
    Inputs in = base.inputs;
    std::fill_n(in.q_I.row(g), in.q_I.row_size(), 0.0);
    c = prepare(base.problem, in, std::nullopt, base.stages);
  }
  Result run(const std::optional<TensorI>& topk) const {
    RunOptions opt;
    opt.precision = Precision::bf16;
    opt.attention_indices = topk;
    Result r = run_core(c.problem, c.inputs, opt);
    if (topk) r.topk = *topk;  // run_core returns its own top-k: this run selected `topk`
    return r;
  }
  // The first run's row g with its last slot on a visible key it left out.
  TensorI another_selection(const Result& first) const {
    TensorI t = first.topk;
    int32_t* row = t.row(g);
    for (int64_t key = c.layout.key_begin(g); key < c.layout.key_end(g); ++key)
      if (std::find(row, row + c.width, key) == row + c.width) {
        row[c.width - 1] = static_cast<int32_t>(key);
        return t;
      }
    throw std::runtime_error("no key left out");
  }
};

TEST(Repeats, AnotherLegalSelectionIsJudgedOnItsOwnAndPasses) {
  Tied t;
  ASSERT_GE(t.g, 0);
  auto oracle = make_cpu_oracle();
  const Result first = t.run(std::nullopt);
  CaseVerdict v = judge(t.c, first, *oracle);
  ASSERT_EQ(v.verdict, Verdict::pass) << v.message;
  const Result again = t.run(t.another_selection(first));
  // The other key moves O of row g far beyond what run 1 would allow: held to run 1 it would fail.
  const TensorCheck& o = check_of(v, "O");
  double moved = 0;
  for (int64_t i = 0; i < first.O.size(); ++i) moved = std::max(moved, std::abs(first.O.data[i] - again.O.data[i]));
  ASSERT_GT(moved, 10 * (o.alpha * o.e_l + o.floor));
  const std::vector<std::string> deterministic = all_but("topk");
  ASSERT_TRUE(selection_changed(first, again, deterministic));
  const CaseVerdict own = judge(t.c, again, *oracle);
  check_repeat(v, first, again, deterministic, &own);
  EXPECT_EQ(v.verdict, Verdict::pass) << v.message;
  for (const std::string n : {"O", "dk_I", "scores", "topk"}) {
    EXPECT_EQ(check_of(v, n).repeat->runs, 2) << n;
    EXPECT_EQ(check_of(v, n).repeat->rejudged, 1) << n;
  }
  EXPECT_EQ(check_of(v, "O").repeat->differing, 0);  // not compared with run 1's keys
  EXPECT_EQ(check_of(v, "topk").repeat->differing, 1);
  EXPECT_EQ(v.oracle_stages.attention[0], 2);  // the oracle ran again on the other keys
  // The scores come before the selection: still held to run 1's bits.
  Result scores_moved = again;
  scores_moved.scores->at(t.g, t.c.layout.key_begin(t.g)) += 1e-3;
  check_repeat(v, first, scores_moved, deterministic, &own);
  EXPECT_EQ(v.verdict, Verdict::fail);
  EXPECT_EQ(v.tensor, "scores");
  EXPECT_EQ(v.failure, Failure::nondeterministic);
}

TEST(Repeats, AnIllegalLaterSelectionFailsAsThatRunsOwnFailure) {
  Tied t;
  auto oracle = make_cpu_oracle();
  const Result first = t.run(std::nullopt);
  CaseVerdict v = judge(t.c, first, *oracle);
  ASSERT_EQ(v.verdict, Verdict::pass) << v.message;
  Result again = first;
  again.topk.at(t.g, 1) = again.topk.at(t.g, 0);  // a repeated key in a row run 1 had legal
  const std::vector<std::string> deterministic = all_but("topk");
  ASSERT_TRUE(selection_changed(first, again, deterministic));
  const CaseVerdict own = judge(t.c, again, *oracle);
  check_repeat(v, first, first, deterministic);  // run 2: the same
  check_repeat(v, first, again, deterministic, &own);
  EXPECT_EQ(v.verdict, Verdict::fail);
  EXPECT_EQ(v.stage, Stage::indexer);
  EXPECT_EQ(v.tensor, "topk");
  EXPECT_EQ(v.failure, Failure::topk_not_equivalent);
  EXPECT_NE(v.message.find("run 3 (another selection): "), std::string::npos) << v.message;
  EXPECT_NE(check_of(v, "topk").detail.find("run 3"), std::string::npos);
  EXPECT_EQ(check_of(v, "topk").repeat->rejudged, 1);
}

TEST(Repeats, AnotherSelectionOfADeclaredTopkIsNondeterministic) {
  Tied t;
  auto oracle = make_cpu_oracle();
  const Result first = t.run(std::nullopt);
  CaseVerdict v = judge(t.c, first, *oracle);
  const Result again = t.run(t.another_selection(first));
  ASSERT_FALSE(selection_changed(first, again, all_but("")));  // nothing to judge apart
  check_repeat(v, first, again, all_but(""));
  EXPECT_EQ(v.verdict, Verdict::fail);
  EXPECT_EQ(v.tensor, "topk");
  EXPECT_EQ(v.failure, Failure::nondeterministic);
  EXPECT_EQ(check_of(v, "topk").repeat->rejudged, 0);
}

TEST(Repeats, ALaterRunThatCannotBeJudgedIsNeverAPass) {
  Judged j;
  CaseVerdict own;
  own.verdict = Verdict::cannot_run;
  own.message = "the exact oracle is not finite where SPEC.md says it is";
  check_repeat(j.v, j.first, j.first, all_but("topk"), &own);
  EXPECT_EQ(j.v.verdict, Verdict::cannot_run);
  EXPECT_EQ(j.v.message, "run 2 (another selection): " + own.message);
}

}  // namespace repeats_test
}  // namespace
}  // namespace dsa
