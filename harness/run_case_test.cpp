#include "harness/run_case.hpp"

#include <algorithm>
#include <functional>

#include <gtest/gtest.h>

#include "harness/generate.hpp"
#include "reference/core.hpp"
#include "core/errors.hpp"

namespace dsa {
namespace {

// A backend built from a function of the case's inputs.
class FnBackend : public Backend {
 public:
  using Fn = std::function<Result(const Case&, const Inputs&, const std::optional<TensorI>&)>;
  explicit FnBackend(Fn f) : f_(std::move(f)) {}
  std::string name() const override { return "test:fn"; }
  BackendRun run(const Case& c, const PreparedCase& pc) override {
    const Inputs& in = pc.inputs;
    const std::optional<TensorI>& inj = pc.injected;
    BackendRun r;
    r.result = f_(c, in, inj);
    return r;
  }

 private:
  Fn f_;
};

Result exact_run(const Case& c, const Inputs& in, const std::optional<TensorI>& inj) {
  RunOptions o;
  o.attention_indices = inj;
  return run_core(c.problem, in, o);
}

// One indexer head, ReLU and rows of q_I <= 0: whole rows score exactly 0 (SPEC.md §3).
Case ties_case() {
  Case c;
  c.seed = 21;
  c.problem.seqlens = {24};
  c.problem.dims.HI = 1;
  c.problem.topk = 4;
  c.init.score_ties = true;
  return c;
}

// The row and slot of a canonical top-k row whose boundary key ties with a key left out, and
// that key.
struct Flip {
  int64_t g = -1, slot = -1;
  int32_t other = -1;
};
Flip find_tie(const Result& r, int64_t width) {
  for (int64_t g = 0; g < r.topk.dim(0); ++g) {
    const int32_t last = r.topk.at(g, width - 1);
    if (last < 0) continue;
    for (int64_t t = 0; t <= g; ++t) {
      if (std::find(r.topk.row(g), r.topk.row(g) + width, t) != r.topk.row(g) + width) continue;
      if (r.scores->at(g, t) == r.scores->at(g, last)) return {g, width - 1, static_cast<int32_t>(t)};
    }
  }
  return {};
}

TEST(RunCase, ExactBackendPassesEveryTensor) {
  FnBackend b(exact_run);
  CaseVerdict v = run_case(ties_case(), b);
  EXPECT_EQ(v.verdict, Verdict::pass) << v.message;
  EXPECT_GE(v.checks.size(), 15u);  // topk and the 14 float outputs (scores when produced)
  for (auto& ch : v.checks) EXPECT_EQ(ch.status, CheckStatus::pass) << ch.tensor;
}

TEST(RunCase, LegalTieFlipIsNotAnAttentionMismatch) {
  const Case c = ties_case();
  const Inputs in = generate_inputs(c);
  const Result canonical = exact_run(c, in, std::nullopt);
  const int64_t width = canonical.topk.dim(1);
  const Flip f = find_tie(canonical, width);
  ASSERT_GE(f.g, 0) << "the case must have a tied top-k boundary";
  TensorI flipped = canonical.topk;
  flipped.at(f.g, f.slot) = f.other;
  // The backend selects the other tied key and attends over it, as a fused kernel may.
  FnBackend b([&](const Case& cc, const Inputs& ii, const std::optional<TensorI>&) {
    Result r = exact_run(cc, ii, flipped);
    r.topk = flipped;
    return r;
  });
  const Result flipped_run = exact_run(c, in, flipped);
  ASSERT_NE(flipped_run.O.at(f.g, 0, 0), canonical.O.at(f.g, 0, 0)) << "the flip must change the attention";
  CaseVerdict v = run_case(c, b);
  EXPECT_EQ(v.verdict, Verdict::pass) << v.message;
  // The exact oracle was recomputed on the backend's keys: the (exact) backend matches it exactly,
  // rather than merely within a tolerance that the flip also inflated.
  for (auto& ch : v.checks)
    if (ch.tensor != "topk") { EXPECT_EQ(ch.e_f, 0) << ch.tensor; }
}

TEST(RunCase, NonEquivalentTopkIsCaughtAndLocated) {
  const Case c = ties_case();
  FnBackend b([](const Case& cc, const Inputs& ii, const std::optional<TensorI>& inj) {
    Result r = exact_run(cc, ii, inj);
    r.topk.at(5, 0) = 9;  // row 5 cannot see key 9
    return r;
  });
  CaseVerdict v = run_case(c, b);
  ASSERT_TRUE(v.failed());
  EXPECT_EQ(v.tensor, "topk");
  EXPECT_EQ(v.failure, Failure::topk_not_equivalent);
  EXPECT_NE(v.message.find("row 5"), std::string::npos) << v.message;
  EXPECT_EQ(v.bucket, "test:fn/indexer/topk/topk-not-equivalent");
  // The attention was computed on the exact keys, so it is not blamed for the indexer's bug.
  for (auto& ch : v.checks)
    if (ch.stage == Stage::attention) { EXPECT_EQ(ch.status, CheckStatus::pass) << ch.tensor; }
}

TEST(RunCase, InjectedIndicesReachBothOracles) {
  Case c = ties_case();
  c.init.inject_indices = true;
  FnBackend b(exact_run);  // attends over the injected indices, as it must
  CaseVerdict v = run_case(c, b);
  EXPECT_EQ(v.verdict, Verdict::pass) << v.message;
  FnBackend ignores([](const Case& cc, const Inputs& ii, const std::optional<TensorI>&) {
    return exact_run(cc, ii, std::nullopt);  // its own top-k instead of the injected indices
  });
  CaseVerdict w = run_case(c, ignores);
  EXPECT_TRUE(w.failed());
  EXPECT_EQ(w.stage, Stage::attention);
}

TEST(RunCase, OnlyTheListedStagesAreChecked) {
  Case c = ties_case();
  c.stages = {Stage::loss};
  FnBackend b([](const Case& cc, const Inputs& ii, const std::optional<TensorI>& inj) {
    Result r = exact_run(cc, ii, inj);
    r.O.data[0] += 1;  // wrong, but the attention is not checked
    return r;
  });
  CaseVerdict v = run_case(c, b);
  EXPECT_EQ(v.verdict, Verdict::pass) << v.message;
  ASSERT_EQ(v.checks.size(), 2u);
  EXPECT_EQ(v.checks[0].tensor, "kl");
  EXPECT_EQ(v.checks[1].tensor, "loss");
}

// --repeat: bitwise reproducible but for its top-k, whose ties resolve otherwise from the 2nd run on.
class TopkUnclaimed : public FnBackend {
 public:
  using FnBackend::FnBackend;
  std::vector<std::string> deterministic() const override {
    std::vector<std::string> d = all_result_tensors();
    d.erase(std::find(d.begin(), d.end(), "topk"));
    return d;
  }
};

TEST(RunCase, RepeatJudgesAnotherSelectionOnItsOwn) {
  const Case c = ties_case();
  const Result canonical = exact_run(c, generate_inputs(c), std::nullopt);
  const Flip f = find_tie(canonical, canonical.topk.dim(1));
  ASSERT_GE(f.g, 0);
  auto backend = [&](TensorI later) {
    return TopkUnclaimed([&, later, runs = 0](const Case& cc, const Inputs& ii, const std::optional<TensorI>&) mutable {
      if (runs++ == 0) return exact_run(cc, ii, std::nullopt);
      Result r = exact_run(cc, ii, later);
      r.topk = later;
      return r;
    });
  };
  TensorI legal = canonical.topk, illegal = canonical.topk;
  legal.at(f.g, f.slot) = f.other;
  illegal.at(f.g, f.slot) = illegal.at(f.g, 0);  // a repeated key
  TopkUnclaimed tie_flip = backend(legal);
  CaseVerdict v = run_case(c, tie_flip, nullptr, /*repeat=*/3);
  EXPECT_EQ(v.verdict, Verdict::pass) << v.message;
  for (auto& ch : v.checks) {
    ASSERT_TRUE(ch.repeat) << ch.tensor;
    EXPECT_EQ(ch.repeat->runs, 3) << ch.tensor;
    EXPECT_EQ(ch.repeat->rejudged, 2) << ch.tensor;
  }
  TopkUnclaimed repeated_key = backend(illegal);
  CaseVerdict w = run_case(c, repeated_key, nullptr, /*repeat=*/2);
  ASSERT_TRUE(w.failed());
  EXPECT_EQ(w.tensor, "topk");
  EXPECT_EQ(w.failure, Failure::topk_not_equivalent);
  EXPECT_NE(w.message.find("run 2 (another selection): "), std::string::npos) << w.message;
  EXPECT_EQ(w.bucket, "test:fn/indexer/topk/topk-not-equivalent");
}

TEST(RunCase, NothingProducedIsNotRunNeverAPass) {
  FnBackend b([](const Case&, const Inputs&, const std::optional<TensorI>&) { return Result{}; });
  CaseVerdict v = run_case(ties_case(), b);
  EXPECT_EQ(v.verdict, Verdict::not_run);
  EXPECT_FALSE(v.failed());
  for (auto& ch : v.checks) EXPECT_EQ(ch.status, CheckStatus::not_checked);
}

TEST(RunCase, ExceptionsAreCrashesAndUnavailableCannotRun) {
  FnBackend crash([](const Case&, const Inputs&, const std::optional<TensorI>&) -> Result {
    throw std::runtime_error("illegal memory access");
  });
  CaseVerdict v = run_case(ties_case(), crash);
  EXPECT_EQ(v.failure, Failure::crash);
  EXPECT_EQ(v.message, "illegal memory access");
  FnBackend slow([](const Case&, const Inputs&, const std::optional<TensorI>&) -> Result {
    throw std::runtime_error("exec: timed out after 5 s");
  });
  EXPECT_EQ(run_case(ties_case(), slow).failure, Failure::timeout);
  FnBackend absent([](const Case&, const Inputs&, const std::optional<TensorI>&) -> Result {
    throw Unavailable("no device");
  });
  EXPECT_EQ(run_case(ties_case(), absent).verdict, Verdict::cannot_run);
}

}  // namespace
}  // namespace dsa
