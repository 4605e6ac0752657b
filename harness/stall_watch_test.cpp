// A case that never returns (an in-process backend stuck in a kernel or a lock) must not hang the
// session nor lose its report: past the hard time limit, or after a signal, the stall watch writes
// the report and ends the process (harness/stall_watch.hpp). Each run is a death test: the session
// ends its own process.
#include "harness/stall_watch.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/backend.hpp"
#include "harness/fuzz.hpp"
#include "harness/schema_testing.hpp"
#include "core/errors.hpp"
#include "core/test_dirs.hpp"

namespace dsa {
namespace {

using json = nlohmann::json;

// The lowp reference, except that its stuck_at-th run never returns (well: 60 s, so that a watch
// that does not fire fails the test instead of hanging it), after raising `signal` if non-zero.
class StuckBackend final : public Backend {
 public:
  StuckBackend(int stuck_at, int signal) : stuck_at_(stuck_at), signal_(signal) {}
  std::string name() const override { return "test:stuck"; }
  BackendRun run(const Case& c, const PreparedCase& pc) override {
    if (++runs_ == stuck_at_) {
      if (signal_) std::raise(signal_);
      std::this_thread::sleep_for(std::chrono::seconds(60));
      throw std::runtime_error("the stall watch did not end the session");
    }
    return lowp_->run(c, pc);
  }

 private:
  int stuck_at_, signal_;
  int runs_ = 0;
  std::unique_ptr<Backend> lowp_ = make_reference_backend("lowp", Precision::bf16);
};

// Named without the pid: the death test's child (a new process running the same test) must
// write where the parent reads.
std::string scratch_dir() { return test_dirs::scratch_dir("dsa-stall", test_dirs::Who::user); }

SessionOptions smoke_session(const std::string& dir) {
  SessionOptions o;
  o.profile = "smoke";
  o.seed = 3;
  o.progress = false;
  o.report = dir + "/r.json";
  o.junit = dir + "/r.xml";
  o.stall_grace_s = 0.5;
  o.stall_after_signal_s = 0.5;
  return o;
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "no report at " << path;
  return json::parse(f);
}

// Runs the session o on a backend whose stuck_at-th run never returns (after raising `signal`),
// as a death test that must exit with `code`; returns the seconds it took.
double run_stuck_session(const SessionOptions& o, int stuck_at, int signal, int code) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EXIT(
      {
        StuckBackend backend(stuck_at, signal);
        run_session(o, backend);
      },
      ::testing::ExitedWithCode(code), "");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(StallWatch, CaseStuckPastTheHardLimitIsRecordedUnfinishedAndTheReportWritten) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string d = scratch_dir();
  SessionOptions o = smoke_session(d);
  o.time_budget_s = 2.0;  // hard limit 3 s; the watch gives up at 3.5 s
  const double took = run_stuck_session(o, 3, 0, 3);
  EXPECT_LT(took, 30) << "the watch must end the session soon after the hard limit";
  const json r = read_json(o.report);
  ASSERT_EQ(r["cases"].size(), 3u) << r.dump(1);
  EXPECT_EQ(r["cases"][0]["verdict"], "pass");
  EXPECT_EQ(r["cases"][1]["verdict"], "pass");
  const json& stuck = r["cases"][2];
  EXPECT_EQ(stuck["verdict"], "not-run");
  const std::string msg = stuck.value("message", "");
  EXPECT_NE(msg.find("unfinished: still running"), std::string::npos) << msg;
  EXPECT_NE(msg.find("past the hard time limit"), std::string::npos) << msg;
  EXPECT_NE(msg.find("backend"), std::string::npos) << "where it was stuck: " << msg;
  EXPECT_EQ(r["summary"]["not_run"], 1);
  const std::string file = stuck.value("case_file", "");
  EXPECT_TRUE(!file.empty() && std::filesystem::exists(std::filesystem::path(d) / file)) << stuck.dump(1);
  DSA_EXPECT_MATCHES_SCHEMA(r, "report.schema.json");
  std::ifstream junit(o.junit);
  const std::string xml((std::istreambuf_iterator<char>(junit)), {});
  EXPECT_NE(xml.find("unfinished: still running"), std::string::npos) << xml;
}

TEST(StallWatch, CaseStuckAfterSigtermEndsTheSessionWith143AndItsReport) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string d = scratch_dir();
  SessionOptions o = smoke_session(d);
  o.cases = 32;  // no time budget: only the signal can end it
  run_stuck_session(o, 2, SIGTERM, 143);
  const json r = read_json(o.report);
  ASSERT_EQ(r["cases"].size(), 1u) << "the case in flight at the signal is left out: " << r.dump(1);
  EXPECT_EQ(r["cases"][0]["verdict"], "pass");
  EXPECT_EQ(r["context"]["interrupted"], true);
  DSA_EXPECT_MATCHES_SCHEMA(r, "report.schema.json");
}

// --case-timeout: without any time budget, a case whose backend run has not returned after that
// long fails as a timeout of the backend (as --exec-timeout makes it for exec: backends), with its
// case file and repro line; the cases before it keep their verdicts, and the run exits 1.
TEST(StallWatch, ABackendStuckPastCaseTimeoutFailsAsATimeoutWithItsReproLine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string d = scratch_dir();
  SessionOptions o = smoke_session(d);
  o.cases = 32;
  o.case_timeout_s = 1.0;  // a smoke case takes milliseconds
  const double took = run_stuck_session(o, 2, 0, 1);
  EXPECT_LT(took, 30) << "the watch must end the session soon after --case-timeout";
  const json r = read_json(o.report);
  ASSERT_EQ(r["cases"].size(), 2u) << r.dump(1);
  EXPECT_EQ(r["cases"][0]["verdict"], "pass");
  const json& stuck = r["cases"][1];
  EXPECT_EQ(stuck["verdict"], "fail");
  EXPECT_EQ(stuck["bucket"], "test:stuck/run/-/timeout");
  const std::string msg = stuck.value("message", "");
  EXPECT_NE(msg.find("past --case-timeout (1 s)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("backend"), std::string::npos) << "where it was stuck: " << msg;
  // The stuck case can be run again: its case file, named relative to the report, and repro line.
  const std::string file = stuck.value("case_file", "");
  ASSERT_FALSE(file.empty()) << stuck.dump(1);
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(d) / file)) << file;
  EXPECT_NE(stuck.value("repro", "").find(file), std::string::npos) << stuck.dump(1);
  EXPECT_NE(stuck.value("repro", "").find("--case-timeout 1"), std::string::npos) << "it would hang again without";
  EXPECT_EQ(r["summary"]["failed"], 1);
  DSA_EXPECT_MATCHES_SCHEMA(r, "report.schema.json");
}

// The watch's own contract: it calls check until destroyed, and its destructor returns promptly.
TEST(StallWatch, CallsItsCheckUntilDestroyed) {
  std::atomic<int> calls{0};
  {
    StallWatch w([&] { ++calls; }, 0.01);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const int seen = calls.load();
  EXPECT_GE(seen, 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(calls.load(), seen) << "no call after the destructor";
}

}  // namespace
}  // namespace dsa
