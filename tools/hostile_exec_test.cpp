// The exec backend against a hostile implementation (tools/testdata/hostile_backend.py, one
// failure mode per name): every mode through `dsa-parity repro CASE --backend exec:...` ends with
// the expected exit code and failure class (never 4, never a crash of the harness, 0 only for a
// legal output), within a deadline, with no process it started still running, and with the report
// written as valid JSON (valid UTF-8, capped messages) and the JUnit file as well-formed XML.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/text.hpp"
#include "tools/shell_testing.hpp"

namespace dsa {
namespace {
namespace hostile_exec_test {  // its own names in a unity build (README "Layout of the source")

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kBin = DSA_PARITY_BIN;
const std::string kSource = DSA_SOURCE_DIR;
const std::string kScript = kSource + "/tools/testdata/hostile_backend.py";

std::string q(const std::string& s) { return cli_testing::shell_quote(s); }

std::string slurp(const std::string& path) { return cli_testing::slurp(path); }

// A pid that no longer runs (gone, or a zombie waiting for init).
bool dead(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

struct Want {
  int code;
  std::string failure;  // the failure class; "" for a pass
};

std::map<std::string, Want> expectations() {
  const Want crash{1, "crash"}, timeout{1, "timeout"}, pass{0, ""};
  std::map<std::string, Want> m = {
      {"legit", pass},
      {"exit1", crash},
      {"exit3_after_write", crash},
      {"segv", crash},
      {"sigkill", crash},
      {"abort", crash},
      {"hang", timeout},
      {"hang_ignoring_term", timeout},
      {"hang_after_write", timeout},
      {"hang_closed_fds", timeout},
      {"stray_child", pass},                 // legal outputs; its child is killed with the group
      {"stray_child_holding_stderr", pass},  // the same, the child holding the output pipe open
      {"fifo_outputs", crash},
      {"symlink_dev_zero", crash},
      {"symlink_dev_urandom", crash},
      {"symlink_outside", crash},
      {"symlink_inside", pass},  // a link within the folder to a legal file is legal
      {"symlink_dangling", crash},
      {"directory", crash},
      {"empty_file", crash},
      {"seven_bytes", crash},
      {"truncated_header", crash},
      {"header_length_huge", crash},
      {"header_not_json", crash},
      {"header_json_array", crash},
      {"header_deep_nesting", crash},
      {"header_invalid_utf8", crash},
      {"duplicate_names", crash},
      {"unknown_name", crash},
      {"wrong_dtype_topk_f32", crash},
      {"wrong_shape", crash},
      {"wrong_rank", crash},
      {"negative_shape", crash},
      {"offsets_overlapping", crash},
      {"offsets_out_of_range", crash},
      {"offsets_float", crash},
      {"metadata_not_string", crash},
      {"trailing_bytes", crash},
      {"nan_everywhere", {1, "nan"}},
      {"inf_everywhere", {1, "inf-pattern"}},
      {"poison_bytes", {1, "unwritten"}},
      {"wrong_values", {1, "mismatch"}},
      {"only_topk", {1, "unwritten"}},  // a pass needs every tensor compared: the rest fail unwritten
      {"writes_nothing", crash},
      {"oversized_file", crash},
      {"topk_out_of_range", {1, "topk-not-equivalent"}},
      {"topk_negative", {1, "topk-not-equivalent"}},
      {"topk_i64", pass},                   // I64 top-k is accepted (converted like I32)
      {"f16_outputs", {1, "inf-pattern"}},  // F16 is accepted; all-zero scores miss the -inf pattern
      {"invalid_utf8_stderr", crash},
      {"huge_stderr", crash},
      {"stdout_spam", pass},
      {"control_chars_stderr", crash},
      {"deletes_its_folder", crash},
  };
  // Root reads a mode-000 file and folder; anyone else cannot.
  m["chmod_000_outputs"] = geteuid() == 0 ? pass : crash;
  m["chmod_000_folder"] = geteuid() == 0 ? pass : crash;
  return m;
}

std::vector<std::string> script_modes() {
  const auto run = cli_testing::run_shell("python3 " + q(kScript) + " --list x");
  std::vector<std::string> modes;
  std::istringstream in(run.out);
  for (std::string m; std::getline(in, m);)
    if (!m.empty()) modes.push_back(m);
  return modes;
}

TEST(HostileExec, EveryFailureModeEndsCleanly) {
  if (cli_testing::run_shell("python3 -c 'pass' 2>/dev/null").code != 0) GTEST_SKIP() << "python3 not found";
  const fs::path d = fs::temp_directory_path() / ("dsa-hostile-" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  std::ofstream(d / "case.json") << R"({"schema": "dsa-parity/case/v1", "seed": 3, "softmax_scale": 0.3,
      "seqlens": [3, 2], "topk": 2, "dims": {"H": 2, "Dn": 4, "R": 2, "C": 4, "Dv": 4, "HI": 2, "DI": 4}})";
  const auto want = expectations();
  const auto modes = script_modes();
  ASSERT_GE(modes.size(), 40u);
  int handled = 0;
  for (const std::string& mode : modes) {
    SCOPED_TRACE(mode);
    auto it = want.find(mode);
    ASSERT_NE(it, want.end()) << "mode without an expected outcome";
    // The hanging modes meet a 2 s timeout; the others get 10 s, so that a loaded machine (ctest -j16)
    // starting python slowly does not turn a legal output into a timeout.
    const std::string exec_timeout = it->second.failure == "timeout" ? "2" : "10";
    const std::string pids = (d / ("pids-" + mode)).string(), rep = (d / ("r-" + mode + ".json")).string(),
                      junit = (d / ("j-" + mode + ".xml")).string(), err = (d / ("e-" + mode + ".txt")).string();
    const std::string line = "cd " + q(d.string()) + " && DSA_PARITY_BIN=" + q(kBin) + " HOSTILE_PIDS=" + q(pids) +
                             " HOSTILE_SCRATCH=" + q(d.string()) + " timeout -s KILL 60 " + q(kBin) +
                             " repro case.json --exec-timeout " + exec_timeout + " --report " + q(rep) + " --junit " + q(junit) +
                             " --backend " + q("exec:python3 " + kScript + " " + mode) + " >/dev/null 2>" + q(err);
    const auto t0 = std::chrono::steady_clock::now();
    const int code = cli_testing::run_shell(line).code;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bool ok = true;
    auto check = [&](bool c) { ok = ok && c; return c; };
    EXPECT_TRUE(check(code == it->second.code)) << "exit " << code << ", stderr: " << slurp(err).substr(0, 2000);
    EXPECT_TRUE(check(seconds < 15)) << seconds << " s";
    // The report: valid JSON (so valid UTF-8), the same verdict, the message capped.
    json r;
    try {
      r = json::parse(slurp(rep));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "report is not valid JSON: " << e.what();
      continue;
    }
    EXPECT_TRUE(check(r["summary"]["exit_code"] == code));
    ASSERT_EQ(r["cases"].size(), 1u);
    const json& c = r["cases"][0];
    if (it->second.failure.empty()) {
      EXPECT_TRUE(check(c["verdict"] == "pass")) << c.dump();
    } else {
      EXPECT_TRUE(check(c["verdict"] == "fail")) << c.dump();
      EXPECT_TRUE(check(c["failure"].is_object() && c["failure"]["class"] == it->second.failure)) << c["failure"].dump();
    }
    const std::string message = c.value("message", std::string());  // a passing case's compact record has none
    EXPECT_TRUE(check(text::valid_utf8(message)));
    EXPECT_TRUE(check(message.size() <= 16100)) << message.size();
    if (mode == "only_topk") {
      int64_t unwritten = 0;
      for (const json& t : c["tensors"]) unwritten += t["class"] == "unwritten";
      EXPECT_TRUE(check(unwritten >= 10)) << c["tensors"].dump();
    }
    if (mode == "huge_stderr") { EXPECT_NE(message.find("bytes in all"), std::string::npos); }
    // JUnit: well-formed XML whatever the backend printed.
    EXPECT_TRUE(check(cli_testing::run_shell("python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' " +
                                             q(junit) + " 2>&1").code == 0))
        << slurp(junit).substr(0, 2000);
    // No process the mode started outlives the run.
    std::ifstream pid_file(pids);
    int seen = 0;
    for (pid_t pid; pid_file >> pid; ++seen) EXPECT_TRUE(check(dead(pid))) << "pid " << pid << " still runs";
    if (mode != "deletes_its_folder") { EXPECT_GE(seen, 1); }
    if (mode.rfind("stray_child", 0) == 0) {
      EXPECT_TRUE(check(seen >= 2)) << "the stray child's pid was not recorded";
    }
    handled += ok;
  }
  std::printf("hostile modes handled: %d / %zu\n", handled, modes.size());
  EXPECT_EQ(handled, static_cast<int>(modes.size()));
  // No exec folder left behind under the scratch folder's parent by this test's modes.
  fs::remove_all(d);
}

}  // namespace hostile_exec_test
}  // namespace
}  // namespace dsa
