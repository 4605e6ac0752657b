// Reliability of a session through the built binary: SIGTERM / SIGINT mid-run (partial report and
// JUnit marked interrupted, exit 143 / 130, no process of the exec backend left, its folder gone),
// report paths refused before the first case, --time-budget as a hard limit, and per-run output
// folders that two concurrent runs never share.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/schema_testing.hpp"
#include "tools/shell_testing.hpp"

namespace dsa {
namespace {
namespace interrupt_test {  // its own names in a unity build (README "Layout of the source")

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::string kBin = DSA_PARITY_BIN;

std::string q(const std::string& s) { return cli_testing::shell_quote(s); }

std::string slurp(const std::string& path) { return cli_testing::slurp(path); }

std::string scratch() { return cli_testing::scratch("dsa-int"); }

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Starts `dsa-parity ARGS...` in dir, stdout and stderr to dir/<tag>.out and dir/<tag>.err.
pid_t spawn(const std::vector<std::string>& args, const std::string& dir, const std::string& tag = "run") {
  std::vector<std::string> all = {kBin};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out = dir + "/" + tag + ".out", err = dir + "/" + tag + ".err";
  const pid_t pid = fork();
  if (pid == 0) {
    if (chdir(dir.c_str()) != 0) _exit(126);
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0) _exit(126);
    dup2(o, 1);
    dup2(e, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// The exit code (128 + N when killed by signal N), or -1 after timeout_s (the process is killed).
// max_rss_kb: the process's peak resident set.
int wait_exit(pid_t pid, double timeout_s, long* max_rss_kb = nullptr) {
  const auto t0 = Clock::now();
  int status = 0;
  for (;;) {
    rusage ru{};
    const pid_t r = wait4(pid, &status, WNOHANG, &ru);
    if (r == pid && max_rss_kb) *max_rss_kb = ru.ru_maxrss;
    if (r == pid) break;
    if (since(t0) > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Alive: exists and is not a zombie (a container's init may be slow to reap orphans).
bool alive(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return false;
  std::string all((std::istreambuf_iterator<char>(f)), {});
  const size_t close = all.rfind(')');
  return close != std::string::npos && close + 2 < all.size() && all[close + 2] != 'Z';
}

bool wait_for(const std::function<bool()>& cond, double timeout_s) {
  const auto t0 = Clock::now();
  while (!cond()) {
    if (since(t0) > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// XML well-formedness through xmllint or Python, whichever the machine has.
int xml_check(const std::string& path) {
  return cli_testing::run_shell("if command -v xmllint >/dev/null; then xmllint --noout " + q(path) +
                                " 2>&1; elif command -v python3 >/dev/null; then python3 -c "
                                "'import sys,xml.etree.ElementTree as E; E.parse(sys.argv[1])' " +
                                q(path) + " 2>&1; else exit 77; fi")
      .code;
}

// A slow exec backend: its first `fast` cases go through the real worker (lowp); every later case
// starts a child that sleeps 60 s, records both pids and the case folder, and waits for it.
std::string slow_backend(const std::string& dir, int fast) {
  const std::string state = dir + "/state";
  fs::create_directories(state);
  const std::string script = dir + "/slow.sh";
  std::ofstream(script) << "#!/bin/sh\n"
                        << "state=" << q(state) << "\n"
                        << "n=$(ls \"$state\" | grep -c '^done')\n"
                        << "if [ \"$n\" -lt " << fast << " ]; then\n"
                        << "  " << q(kBin) << " exec-worker --backend lowp \"$1\" || exit $?\n"
                        << "  touch \"$state/done.$n\"; exit 0\n"
                        << "fi\n"
                        << "sleep 60 &\n"
                        << "echo \"$! $$\" > \"$state/pids.tmp\"; echo \"$1\" > \"$state/folder\"\n"
                        << "mv \"$state/pids.tmp\" \"$state/pids\"\n"
                        << "wait\n";
  return "exec:sh " + script;
}

std::vector<pid_t> read_pids(const std::string& file) {
  std::ifstream f(file);
  std::vector<pid_t> p;
  for (pid_t x; f >> x;) p.push_back(x);
  return p;
}

void interrupt_mid_run(int sig, int expected_code) {
  const std::string d = scratch();
  const std::string backend = slow_backend(d, 2);
  const auto t0 = Clock::now();
  const pid_t pid = spawn({"fuzz", "--backend", backend, "--profile", "smoke", "--cases", "10", "--corpus", "none",
                           "--report", "r.json", "--junit", "j.xml"},
                          d);
  // Two cases done, the third in flight (its sleeping child started).
  const bool in_flight = wait_for([&] { return fs::exists(d + "/state/pids"); }, 120);
  if (!in_flight) kill(pid, SIGKILL);
  ASSERT_TRUE(in_flight) << slurp(d + "/run.out") << slurp(d + "/run.err");
  // While it runs, the report is being streamed: the two cases are on disk already.
  bool streamed = false;
  for (auto& e : fs::directory_iterator(d))
    if (e.path().filename().string().rfind("r.json.", 0) == 0) streamed = slurp(e.path()).find("\"index\"") != std::string::npos;
  EXPECT_TRUE(streamed) << "no partial report beside r.json while the run goes on";
  EXPECT_FALSE(fs::exists(d + "/r.json")) << "the report is renamed into place at the end only";
  const std::vector<pid_t> pids = read_pids(d + "/state/pids");
  ASSERT_EQ(pids.size(), 2u);
  const std::string folder = slurp(d + "/state/folder").substr(0, slurp(d + "/state/folder").find('\n'));
  ASSERT_TRUE(fs::is_directory(folder)) << folder;
  kill(pid, sig);
  const int code = wait_exit(pid, 30);
  EXPECT_EQ(code, expected_code) << slurp(d + "/run.out") << slurp(d + "/run.err");
  EXPECT_LT(since(t0), 60) << "the sleeping backend was waited for";
  // No process of the backend survives, and its folder is gone.
  for (pid_t p : pids) EXPECT_TRUE(wait_for([&] { return !alive(p); }, 5)) << "pid " << p << " survived";
  EXPECT_FALSE(fs::exists(folder)) << folder;
  // The partial report: valid, interrupted, the two cases done.
  ASSERT_TRUE(fs::exists(d + "/r.json"));
  const json rep = json::parse(slurp(d + "/r.json"));
  EXPECT_EQ(rep["context"]["interrupted"], true);
  EXPECT_EQ(rep["summary"]["exit_code"], expected_code);
  ASSERT_EQ(rep["cases"].size(), 2u);
  EXPECT_EQ(rep["summary"]["cases"], 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(rep["cases"][i]["index"], i);
    EXPECT_EQ(rep["cases"][i]["verdict"], "pass") << rep["cases"][i]["message"];
  }
  EXPECT_GT(rep["context"]["seconds"].get<double>(), 0);
  DSA_EXPECT_MATCHES_SCHEMA(rep, "report.schema.json");
  // The JUnit: well-formed, two testcases, says interrupted.
  ASSERT_TRUE(fs::exists(d + "/j.xml"));
  const std::string xml = slurp(d + "/j.xml");
  const int xc = xml_check(d + "/j.xml");
  if (xc != 77) {
    EXPECT_EQ(xc, 0) << xml;
  }
  EXPECT_NE(xml.find("<property name=\"interrupted\" value=\"true\"/>"), std::string::npos) << xml;
  EXPECT_NE(xml.find("tests=\"2\""), std::string::npos) << xml;
  size_t testcases = 0;
  for (size_t at = xml.find("<testcase "); at != std::string::npos; at = xml.find("<testcase ", at + 1)) ++testcases;
  EXPECT_EQ(testcases, 2u);
  // The terminal says so too; no temp file is left beside the outputs.
  EXPECT_NE(slurp(d + "/run.out").find("interrupted"), std::string::npos) << slurp(d + "/run.out");
  for (auto& e : fs::directory_iterator(d))
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();
}

TEST(Interrupt, SigtermWritesThePartialReportKillsTheBackendAndExits143) { interrupt_mid_run(SIGTERM, 143); }

TEST(Interrupt, SigintWritesThePartialReportKillsTheBackendAndExits130) { interrupt_mid_run(SIGINT, 130); }

TEST(Interrupt, ReportOrJunitThatCannotBeWrittenIsExitTwoBeforeAnyCase) {
  const std::string d = scratch();
  fs::create_directories(d + "/adir");
  std::ofstream(d + "/afile") << "x";
  const std::string backend = "exec:touch " + d + "/RAN";  // would leave a marker if any case ran
  const std::pair<std::vector<std::string>, std::string> bad[] = {
      {{"--report", "adir"}, "--report"},
      {{"--junit", "adir"}, "--junit"},
      {{"--report", "afile/r.json"}, "--report"},
      {{"--junit", "afile/j.xml"}, "--junit"},
  };
  for (auto& [flags, field] : bad) {
    std::vector<std::string> args = {"fuzz", "--backend", backend, "--profile", "smoke", "--cases", "3"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto t0 = Clock::now();
    const int code = wait_exit(spawn(args, d), 30);
    EXPECT_EQ(code, 2) << field << ": " << slurp(d + "/run.err");
    EXPECT_LT(since(t0), 5.0) << field;
    const std::string err = slurp(d + "/run.err");
    EXPECT_NE(err.find(field), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_FALSE(fs::exists(d + "/RAN")) << field << ": a case ran";
    EXPECT_EQ(slurp(d + "/run.out").find("oracle:"), std::string::npos) << "the session started";
  }
  // replay and repro check the same way.
  const std::string edge = std::string(DSA_SOURCE_DIR) + "/cases/edge/shorter_than_k.json";
  for (const char* cmd : {"replay", "repro"}) {
    const int code = wait_exit(spawn({cmd, edge, "--backend", backend, "--report", "adir"}, d), 30);
    EXPECT_EQ(code, 2) << cmd << ": " << slurp(d + "/run.err");
    EXPECT_FALSE(fs::exists(d + "/RAN")) << cmd;
  }
}

TEST(Interrupt, TimeBudgetIsAHardLimitForACaseInFlight) {
  const std::string d = scratch();
  const std::string backend = slow_backend(d, 1);  // case 0 passes, case 1 sleeps 60 s
  const double budget = 4;
  const auto t0 = Clock::now();
  const int code = wait_exit(spawn({"fuzz", "--backend", backend, "--profile", "smoke", "--time-budget", "4",
                                    "--corpus", "none", "--report", "r.json", "--junit", "j.xml"},
                                   d),
                             60);
  const double wall = since(t0);
  EXPECT_EQ(code, 3) << "an unfinished case is not-run: " << slurp(d + "/run.out") << slurp(d + "/run.err");
  const json rep = json::parse(slurp(d + "/r.json"));
  // The session stopped at 1.5 x the budget by its own clock; the wall adds the start of the process,
  // the end of the case in flight and the report, which a loaded machine (ctest -j16) stretches by
  // seconds, but never toward the backend's 60 s sleep.
  const double session = rep["context"]["seconds"].get<double>();
  EXPECT_LT(session, 1.5 * budget + 1.0) << slurp(d + "/run.out");
  EXPECT_GE(session, 1.5 * budget - 0.1);
  EXPECT_LT(wall, 1.5 * budget + 8) << slurp(d + "/run.out");
  EXPECT_GE(wall, session);
  ASSERT_EQ(rep["cases"].size(), 2u);
  EXPECT_EQ(rep["cases"][0]["verdict"], "pass");
  EXPECT_EQ(rep["cases"][1]["verdict"], "not-run");
  EXPECT_NE(rep["cases"][1]["message"].get<std::string>().find("unfinished"), std::string::npos);
  EXPECT_TRUE(rep["cases"][1]["failure"].is_null()) << "not a timeout of the backend";
  EXPECT_EQ(rep["summary"]["unfinished"], 1);
  EXPECT_EQ(rep["context"]["interrupted"], false);
  DSA_EXPECT_MATCHES_SCHEMA(rep, "report.schema.json");
  for (pid_t p : read_pids(d + "/state/pids")) EXPECT_TRUE(wait_for([&] { return !alive(p); }, 5)) << p;
  EXPECT_NE(slurp(d + "/j.xml").find("<property name=\"unfinished\" value=\"1\"/>"), std::string::npos);
}

// The repro lines of a run's stdout: the case files they name.
std::vector<std::string> repro_files(const std::string& out) {
  std::vector<std::string> files;
  const std::string key = std::string("repro: ") + DSA_PARITY_BIN + " repro ";  // the binary as invoked
  for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + 1)) {
    const size_t from = at + key.size();
    files.push_back(out.substr(from, out.find(" --backend", from) - from));
  }
  return files;
}

TEST(Interrupt, ConcurrentRunsWriteToTheirOwnFolders) {
  const std::string d = scratch();
  // The same seed, the same folder, the same second: only the run id tells them apart.
  const std::vector<std::string> args = {"fuzz", "--backend", "mutant:kl_reversed", "--profile", "smoke",
                                         "--cases", "4", "--corpus", "none", "--shrink"};
  const pid_t a = spawn(args, d, "a"), b = spawn(args, d, "b");
  ASSERT_EQ(wait_exit(a, 120), 1) << slurp(d + "/a.out") << slurp(d + "/a.err");
  ASSERT_EQ(wait_exit(b, 120), 1) << slurp(d + "/b.out") << slurp(d + "/b.err");
  std::set<std::string> folders[2];
  int i = 0;
  for (const char* tag : {"a", "b"}) {
    const std::string out = slurp(d + "/" + tag + ".out");
    const std::vector<std::string> files = repro_files(out);
    ASSERT_FALSE(files.empty()) << out;
    for (auto& f : files) {
      EXPECT_TRUE(fs::exists(fs::path(d) / f)) << f;
      EXPECT_EQ(f[0], '/') << "terminal repro lines name absolute case paths: " << f;
      const fs::path parent = fs::path(f).parent_path();
      EXPECT_EQ(parent.parent_path(), fs::path(d) / "dsa-parity-out") << f;
      folders[i].insert(parent.string());
    }
    EXPECT_EQ(folders[i].size(), 1u) << "one folder per run";
    // The run id names the seed; the shrunk cases go there too.
    EXPECT_NE(folders[i].begin()->find("-seed1"), std::string::npos) << *folders[i].begin();
    EXPECT_NE(out.find("to " + *folders[i].begin() + "/shrunk-"), std::string::npos) << out;
    ++i;
  }
  EXPECT_NE(*folders[0].begin(), *folders[1].begin());
  // A repro line of run a reproduces from run a's file.
  const std::string line = repro_files(slurp(d + "/a.out"))[0];
  EXPECT_EQ(cli_testing::run_shell("cd " + q(d) + " && " + q(kBin) + " repro " + q(line) +
                                   " --backend mutant:kl_reversed >/dev/null 2>&1")
                .code,
            1);
}

// Some checked stages without tensors to compare: the summary line and JUnit count them.
TEST(Interrupt, TensorsNotCheckedAreCountedInTheSummaryLine) {
  const std::string d = scratch();
  const std::string edge = std::string(DSA_SOURCE_DIR) + "/cases/edge/shorter_than_k.json";
  // A backend that writes an outputs file with no tensor at all: every tensor unchecked.
  std::ofstream(d + "/empty.sh") << "#!/bin/sh\nprintf '\\010\\000\\000\\000\\000\\000\\000\\000{}      ' > \"$1/outputs.safetensors\"\n";
  const int code = wait_exit(spawn({"repro", edge, "--backend", "exec:sh " + d + "/empty.sh", "--report", "r.json",
                                    "--junit", "j.xml"},
                                   d),
                             60);
  const std::string out = slurp(d + "/run.out");
  const json rep = json::parse(slurp(d + "/r.json"));
  ASSERT_EQ(rep["cases"].size(), 1u) << out << slurp(d + "/run.err");
  const size_t unchecked = rep["cases"][0]["not_checked"].size();
  ASSERT_GT(unchecked, 0u) << out << " (exit " << code << ")";
  EXPECT_EQ(rep["summary"]["not_checked_tensors"], unchecked);
  EXPECT_EQ(rep["summary"]["not_checked_cases"], 1);
  EXPECT_NE(out.find(std::to_string(unchecked) + " tensors not checked in 1 case"), std::string::npos) << out;
  EXPECT_NE(slurp(d + "/j.xml").find("<property name=\"not_checked_tensors\" value=\"" + std::to_string(unchecked) + "\"/>"),
            std::string::npos);
}

// Streaming keeps no case record in memory: 15x the cases, about the same peak memory (the
// whole-report writer grew by about 80 KB a case: 254 MB at 3000 smoke cases).
TEST(Interrupt, ReportMemoryStaysFlatAsCasesGrow) {
  const std::string d = scratch();
  long few = 0, many = 0;
  for (auto [cases, rss] : {std::pair<const char*, long*>{"100", &few}, {"1500", &many}}) {
    const int code = wait_exit(spawn({"fuzz", "--backend", "lowp", "--profile", "smoke", "--cases", cases, "--corpus",
                                      "none", "--report", "r.json", "--junit", "j.xml"},
                                     d),
                               300, rss);
    ASSERT_EQ(code, 0) << slurp(d + "/run.out") << slurp(d + "/run.err");
  }
  EXPECT_EQ(json::parse(slurp(d + "/r.json"))["cases"].size(), 1500u);
  EXPECT_GT(few, 0);
  EXPECT_LT(many, few + 24 * 1024) << "peak RSS " << few << " KB at 100 cases, " << many << " KB at 1500";
}

// In-process backends are not stopped mid-case: the first signal waits for the case to finish, a
// second one exits at once (without the report: the partial file beside it is all there is).
TEST(Interrupt, SecondSignalExitsAtOnce) {
  const std::string d = scratch();
  json c = json::parse(slurp(std::string(DSA_SOURCE_DIR) + "/cases/edge/shorter_than_k.json"));
  c["seqlens"] = {3000};  // about 10 s on lowp
  c["dims"] = {{"H", 8}, {"Dn", 32}, {"R", 16}, {"C", 64}, {"Dv", 32}, {"HI", 4}, {"DI", 32}};
  c["topk"] = 256;
  c["loss"]["mode"] = "dense";
  std::ofstream(d + "/big.json") << c.dump();
  const pid_t pid = spawn({"repro", "big.json", "--backend", "lowp", "--report", "r.json"}, d);
  // The session has started once its streamed report is there.
  ASSERT_TRUE(wait_for([&] { return fs::exists(d + "/r.json.partial-" + std::to_string(pid)); }, 30));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(pid, SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "the first signal should wait for the case in flight";
  const auto t1 = Clock::now();
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, 30), 143);
  EXPECT_LT(since(t1), 2.0) << "the second signal did not exit at once";
  EXPECT_FALSE(fs::exists(d + "/r.json"));
}

}  // namespace interrupt_test
}  // namespace
}  // namespace dsa
