// CasePrefetch (harness/prefetch.hpp): a case prepared ahead is the case prepare_case makes, bit
// for bit; a case that was not started is prepared on the spot without dropping what is in flight;
// a bad case's error reaches the caller of take. A backend run ahead gives the verdict the run in
// turn gives, its failures included, and the backend never runs two cases at once.
#include "harness/prefetch.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "core/errors.hpp"
#include "harness/generate.hpp"
#include "harness/run_case.hpp"

namespace dsa {
namespace {

Case seeded(int64_t index) { return random_case("smoke", 17, index); }

void expect_same_inputs(const PreparedCase& a, const PreparedCase& b) {
  std::vector<const TensorD*> bs;
  b.inputs.for_each([&](const std::string&, const TensorD& t) { bs.push_back(&t); });
  size_t k = 0;
  a.inputs.for_each([&](const std::string& name, const TensorD& t) {
    ASSERT_LT(k, bs.size());
    EXPECT_EQ(t.shape, bs[k]->shape) << name;
    // Bit for bit: poisoned pad rows hold NaN.
    EXPECT_EQ(t.data.size(), bs[k]->data.size()) << name;
    if (t.data.size() == bs[k]->data.size())
      EXPECT_EQ(std::memcmp(t.data.data(), bs[k]->data.data(), t.data.size() * sizeof(double)), 0) << name;
    ++k;
  });
  EXPECT_EQ(a.layout.tp, b.layout.tp);
  EXPECT_EQ(a.injected.has_value(), b.injected.has_value());
  if (a.injected && b.injected) EXPECT_EQ(a.injected->data, b.injected->data);
}

TEST(CasePrefetch, PreparedAheadIsThePreparedCase) {
  CasePrefetch f;
  const Case a = seeded(1), b = seeded(2);
  f.start(a);
  f.start(b);
  double waited = -1;
  expect_same_inputs(f.take(a, &waited), prepare_case(a));
  EXPECT_GE(waited, 0);
  expect_same_inputs(f.take(b), prepare_case(b));
}

TEST(CasePrefetch, ACaseNotStartedIsPreparedAndKeepsTheOneInFlight) {
  CasePrefetch f;
  const Case a = seeded(3), b = seeded(4), other = seeded(5);
  f.start(a);
  expect_same_inputs(f.take(other), prepare_case(other));
  expect_same_inputs(f.take(a), prepare_case(a));
  // Taking a case drops what was started before it; b was never started: prepared on the spot.
  f.start(a);
  f.start(b);
  expect_same_inputs(f.take(b), prepare_case(b));
  expect_same_inputs(f.take(a), prepare_case(a));
}

TEST(CasePrefetch, AFourthStartDropsTheOldestWhichIsThenPreparedOnTheSpot) {
  CasePrefetch f;
  const Case a = seeded(6), b = seeded(7), c = seeded(8), d = seeded(11);
  f.start(a);
  f.start(b);
  f.start(b);  // started already: nothing new
  f.start(c);
  f.start(d);
  expect_same_inputs(f.take(a), prepare_case(a));
  expect_same_inputs(f.take(c), prepare_case(c));
  expect_same_inputs(f.take(d), prepare_case(d));
}

TEST(CasePrefetch, AnInvalidCaseThrowsFromTake) {
  CasePrefetch f;
  Case bad = seeded(9);
  bad.problem.topk = 0;
  f.start(bad);
  EXPECT_THROW(f.take(bad), InvalidInput);
  // The prefetch is usable after it.
  const Case a = seeded(10);
  f.start(a);
  expect_same_inputs(f.take(a), prepare_case(a));
}

// The CPU reference as a backend, counting its runs, the threads they ran on and whether two ever
// overlapped; case number `throws_at` (by run order) throws `E`.
class WatchedBackend final : public Backend {
 public:
  explicit WatchedBackend(int throws_at = -1, bool unavailable = false)
      : inner_(make_reference_backend("reference", Precision::exact)), throws_at_(throws_at), unavailable_(unavailable) {}
  std::string name() const override { return "watched"; }
  BackendRun run(const Case& c, const PreparedCase& pc) override {
    if (in_flight_.fetch_add(1) != 0) overlapped_ = true;
    struct Done {
      std::atomic<int>& n;
      ~Done() { --n; }
    } done{in_flight_};
    int k;
    {
      std::lock_guard<std::mutex> lock(mu_);
      k = runs_++;
      if (std::this_thread::get_id() != main_) ++off_main_;
    }
    if (k == throws_at_) {
      if (unavailable_) throw Unavailable("watched: this one cannot run");
      throw std::runtime_error("watched: planted failure");
    }
    return inner_->run(c, pc);
  }
  int runs() const { return runs_; }
  int off_main() const { return off_main_; }
  bool overlapped() const { return overlapped_; }

 private:
  std::unique_ptr<Backend> inner_;
  int throws_at_;
  bool unavailable_;
  std::thread::id main_ = std::this_thread::get_id();
  std::mutex mu_;
  int runs_ = 0, off_main_ = 0;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> overlapped_{false};
};

// The fuzz loop's order: start the next two cases, then run this one.
std::vector<CaseVerdict> run_all(Backend& b, const std::vector<Case>& cases, CasePrefetch* f) {
  std::vector<CaseVerdict> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    for (size_t k = i + 1; f && k < std::min(cases.size(), i + 3); ++k) f->start(cases[k]);
    out.push_back(run_case(cases[i], b, nullptr, 1, f));
  }
  return out;
}

std::vector<Case> some_cases(int n, int64_t from) {
  std::vector<Case> cs;
  for (int i = 0; i < n; ++i) cs.push_back(seeded(from + i));
  return cs;
}

TEST(CasePrefetch, ABackendRunAheadGivesTheVerdictsOfRunsInTurn) {
  const std::vector<Case> cases = some_cases(5, 20);
  WatchedBackend plain, ahead;
  const std::vector<CaseVerdict> want = run_all(plain, cases, nullptr);
  CasePrefetch f;
  f.run_backends_ahead(ahead, 1e18);
  const std::vector<CaseVerdict> got = run_all(ahead, cases, &f);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].verdict, want[i].verdict) << "case " << i << ": " << got[i].message;
    ASSERT_EQ(got[i].checks.size(), want[i].checks.size());
    for (size_t k = 0; k < got[i].checks.size(); ++k)
      EXPECT_EQ(got[i].checks[k].e_f, want[i].checks[k].e_f) << "case " << i << " " << got[i].checks[k].tensor;
  }
  EXPECT_EQ(ahead.runs(), 5) << "one run per case";
  EXPECT_EQ(ahead.off_main(), 4) << "every case after the first runs ahead, on the prefetch thread";
  EXPECT_FALSE(ahead.overlapped()) << "two backend runs at once";
}

TEST(CasePrefetch, ARunAheadThatThrowsIsItsCasesCrashOrCannotRun) {
  const std::vector<Case> cases = some_cases(3, 30);
  for (bool unavailable : {false, true}) {
    WatchedBackend b(/*throws_at=*/1, unavailable);
    CasePrefetch f;
    f.run_backends_ahead(b, 1e18);
    const std::vector<CaseVerdict> v = run_all(b, cases, &f);
    EXPECT_EQ(b.off_main(), 2);
    EXPECT_EQ(v[0].verdict, Verdict::pass) << v[0].message;
    if (unavailable) {
      EXPECT_EQ(v[1].verdict, Verdict::cannot_run);
    } else {
      EXPECT_EQ(v[1].verdict, Verdict::fail);
      EXPECT_EQ(v[1].failure, Failure::crash);
      EXPECT_NE(v[1].message.find("planted failure"), std::string::npos) << v[1].message;
      EXPECT_FALSE(v[1].bucket.empty());
    }
    EXPECT_EQ(v[2].verdict, Verdict::pass) << "the case after a failed run ahead: " << v[2].message;
  }
}

TEST(CasePrefetch, NoRunAheadForACaseAboveTheLimitOrUnderRepeat) {
  const std::vector<Case> cases = some_cases(3, 40);
  WatchedBackend small;
  CasePrefetch f;
  f.run_backends_ahead(small, 1);  // every case's inputs take more than a byte
  run_all(small, cases, &f);
  EXPECT_EQ(small.off_main(), 0);
  EXPECT_EQ(small.runs(), 3);
  WatchedBackend repeated;
  CasePrefetch g;
  g.run_backends_ahead(repeated, 1e18);
  for (size_t i = 0; i < cases.size(); ++i) {
    if (i + 1 < cases.size()) g.start(cases[i + 1]);
    run_case(cases[i], repeated, nullptr, /*repeat=*/2, &g);
  }
  EXPECT_EQ(repeated.off_main(), 0) << "--repeat runs the case's later runs after its judge";
  EXPECT_EQ(repeated.runs(), 6);
  EXPECT_FALSE(repeated.overlapped());
}

double inputs_bytes(const Case& c) {
  double n = 0;
  prepare_case(c).inputs.for_each([&](const std::string&, const TensorD& t) { n += double(t.size()) * sizeof(double); });
  return n;
}

// While a large case is judged (the oracle's memory taken), the next one does not run ahead even
// when it is small itself.
TEST(CasePrefetch, NoRunAheadBesideTheJudgeOfALargeCase) {
  std::vector<Case> cases = some_cases(3, 60);
  cases[0].problem.seqlens = {300, 200};
  const double limit = std::max(inputs_bytes(cases[1]), inputs_bytes(cases[2]));
  ASSERT_GT(inputs_bytes(cases[0]), limit);
  WatchedBackend b;
  CasePrefetch f;
  f.run_backends_ahead(b, limit);
  const std::vector<CaseVerdict> v = run_all(b, cases, &f);
  EXPECT_EQ(b.off_main(), 1) << "case 2 runs ahead beside case 1; case 1 not beside case 0";
  for (const CaseVerdict& x : v) EXPECT_EQ(x.verdict, Verdict::pass) << x.message;
}

TEST(CasePrefetch, WaitForBackendLeavesNoRunInFlight) {
  const std::vector<Case> cases = some_cases(2, 50);
  WatchedBackend b;
  CasePrefetch f;
  f.run_backends_ahead(b, 1e18);
  f.start(cases[1]);
  run_case(cases[0], b, nullptr, 1, &f);  // starts case 1's run ahead
  f.wait_for_backend();
  EXPECT_EQ(b.runs(), 2);
  // The backend is now free for a run outside the prefetch (shrink), and case 1's run is kept.
  const PreparedCase pc = prepare_case(cases[0]);
  b.run(cases[0], pc);
  EXPECT_FALSE(b.overlapped());
  const CaseVerdict v1 = run_case(cases[1], b, nullptr, 1, &f);
  EXPECT_EQ(v1.verdict, Verdict::pass) << v1.message;
  EXPECT_EQ(b.runs(), 3) << "case 1 ran once, ahead";
}

}  // namespace
}  // namespace dsa
