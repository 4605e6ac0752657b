// The backend run ahead of the judge (harness/prefetch.hpp) is the fuzz loop's one concurrency,
// and on its own only a device oracle turns it on. Forced here with the CPU oracle, a session must
// give the same cases, verdicts and buckets as one that runs each case in turn, through failing
// cases and their shrinking (which waits for the run in flight), the corpus first.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>

#include "core/test_dirs.hpp"
#include "harness/backend.hpp"
#include "harness/fuzz.hpp"

namespace dsa {
namespace {

using json = nlohmann::json;

// A backend that counts the runs made on a thread other than the one that made it (runs ahead).
class ThreadCounting final : public Backend {
 public:
  explicit ThreadCounting(std::unique_ptr<Backend> b) : b_(std::move(b)) {}
  std::string name() const override { return b_->name(); }
  std::vector<Path> paths() const override { return b_->paths(); }
  std::vector<Stage> stages() const override { return b_->stages(); }
  std::vector<std::string> deterministic() const override { return b_->deterministic(); }
  std::optional<int64_t> cp_size() const override { return b_->cp_size(); }
  DrawLimits draw_limits() const override { return b_->draw_limits(); }
  BackendRun run(const Case& c, const PreparedCase& pc) override {
    if (std::this_thread::get_id() != owner_) ++elsewhere;
    return b_->run(c, pc);
  }
  std::atomic<int> elsewhere{0};

 private:
  std::unique_ptr<Backend> b_;
  std::thread::id owner_ = std::this_thread::get_id();
};

// (origin, verdict, bucket) of each case of a session's report, in order.
std::vector<std::string> outcomes(const SessionOptions& o, Backend& b) {
  run_session(o, b);
  std::ifstream f(o.report);
  const json r = json::parse(f);
  std::vector<std::string> out;
  for (const json& c : r.at("cases"))
    out.push_back(c.value("origin", "") + " " + c.value("verdict", "") + " " + (c.contains("bucket") ? c["bucket"].dump() : ""));
  EXPECT_EQ(r.at("context").value("backend_ahead", false), o.backend_ahead_bytes.has_value());
  return out;
}

TEST(RunAhead, ASessionWithTheBackendAheadGivesTheVerdictsOfOneInTurn) {
  const std::string d = test_dirs::scratch_dir("dsa-ahead");
  for (const char* mutant : {"causal_end_off_by_one", "zigzag_chunk_swap"}) {
    SessionOptions o;
    o.profile = "smoke";
    o.seed = 21;
    o.cases = 24;
    o.progress = false;
    o.output = -1;
    o.shrink = true;
    o.case_files = corpus_files(std::string(DSA_SOURCE_DIR) + "/cases/edge", "--corpus");
    o.regressions_dir = d + "/regressions";
    ThreadCounting b(make_backend(std::string("mutant:") + mutant, BackendOptions{}));
    o.report = d + "/in-turn.json";
    const std::vector<std::string> in_turn = outcomes(o, b);
    EXPECT_EQ(b.elsewhere, 0);
    o.report = d + "/ahead.json";
    o.backend_ahead_bytes = 1e18;
    const std::vector<std::string> ahead = outcomes(o, b);
    EXPECT_GT(b.elsewhere, 10) << mutant << ": most cases' runs must have gone ahead";
    EXPECT_EQ(ahead, in_turn) << mutant;
    EXPECT_GT(in_turn.size(), 24u);
    EXPECT_TRUE(std::any_of(in_turn.begin(), in_turn.end(), [](const std::string& s) { return s.find(" fail ") != std::string::npos; }))
        << mutant << ": the mutant must fail some case, so that shrinking runs beside the run ahead";
  }
}

}  // namespace
}  // namespace dsa
