// fuzz, repro, replay and shrink through the built binary, as a user (or CI) runs them: exit codes,
// the report against its schema, JUnit, repro lines that work, shrunk cases that still fail.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "tools/shell_testing.hpp"
#include <nlohmann/json.hpp>

#include "harness/backend.hpp"
#include "harness/case.hpp"
#include "harness/schema_testing.hpp"
#include "core/layout.hpp"
#include "tools/command.hpp"

namespace dsa {
namespace {
namespace cli_test {  // its own names in a unity build (README "Layout of the source")

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kBin = DSA_PARITY_BIN;
const std::string kSource = DSA_SOURCE_DIR;

std::string q(const std::string& s) { return cli_testing::shell_quote(s); }

using cli_testing::Outcome;

std::string slurp(const std::string& path) { return cli_testing::slurp(path); }

std::string scratch() { return cli_testing::scratch("dsa-cli"); }

// Runs `dsa-parity ARGS` (a shell fragment) in folder dir; raw: ARGS is the whole command line.
Outcome dsa(const std::string& args, const std::string& dir, bool raw = false) {
  return cli_testing::run_in(dir, (raw ? "" : q(kBin) + " ") + args);
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

int64_t count_files(const std::string& dir) {
  int64_t n = 0;
  for (auto& e : fs::recursive_directory_iterator(dir))
    n += e.path().extension() == ".json" && e.path().generic_string().find("/malformed/") == std::string::npos;
  return n;
}

TEST(Cli, SmokeFuzzOnLowpPassesAndWritesAValidReport) {
  const std::string d = scratch();
  Outcome r = dsa("fuzz --backend lowp --profile smoke --seed 1 --report r.json --junit j.xml", d);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json rep = read_json(d + "/r.json");
  EXPECT_EQ(rep["schema"], "dsa-parity/report/v1");
  EXPECT_EQ(rep["context"]["backend"], "lowp");
  EXPECT_EQ(rep["context"]["master_seed"], "1");  // seeds are strings
  EXPECT_EQ(rep["summary"]["failed"], 0);
  EXPECT_EQ(rep["summary"]["exit_code"], 0);
  // The corpus (cases/) is replayed first, edge/ before the rest, then the smoke profile's cases.
  const int64_t corpus = count_files(kSource + "/cases");
  ASSERT_GE(corpus, 15);
  EXPECT_EQ(rep["summary"]["cases"].get<int64_t>(), corpus + 32);
  // The first corpus case's origin: relative to the report's folder, or from the corpus where that
  // path would climb to the root; either way the source tree's absolute path is nowhere in the report.
  const std::string origin0 = rep["cases"][0]["origin"];
  EXPECT_TRUE(origin0.find("/cases/edge/") != std::string::npos || origin0.rfind("corpus edge/", 0) == 0) << origin0;
  EXPECT_EQ(slurp(d + "/r.json").find(fs::absolute(kSource).lexically_normal().string() + "/cases"), std::string::npos);
  EXPECT_EQ(rep["cases"][corpus]["origin"], "random smoke seed 1 #0");
  for (auto& c : rep["cases"]) {
    EXPECT_EQ(c["verdict"], "pass") << c["description"];
    EXPECT_EQ(c["compact"], true);
    EXPECT_FALSE(c["margins"].empty());
    EXPECT_LE(c.dump().size(), 1024u);
  }
  const std::string xml = slurp(d + "/j.xml");
  EXPECT_NE(xml.find("failures=\"0\""), std::string::npos);
  EXPECT_NE(xml.find("<testcase"), std::string::npos);
  EXPECT_NE(r.out.find("0 failed"), std::string::npos);
  DSA_EXPECT_MATCHES_SCHEMA(rep, "report.schema.json");
}

TEST(Cli, SameSeedSameCases) {
  const std::string d = scratch();
  ASSERT_EQ(dsa("fuzz --backend reference --profile smoke --seed 5 --cases 6 --corpus none --report a.json", d).code, 0);
  ASSERT_EQ(dsa("fuzz --backend reference --profile smoke --seed 5 --cases 6 --corpus none --report b.json", d).code, 0);
  ASSERT_EQ(dsa("fuzz --backend reference --profile smoke --seed 6 --cases 6 --corpus none --report c.json", d).code, 0);
  const json a = read_json(d + "/a.json"), b = read_json(d + "/b.json"), c = read_json(d + "/c.json");
  ASSERT_EQ(a["cases"].size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(a["cases"][i]["case"], b["cases"][i]["case"]);
  EXPECT_NE(a["cases"][0]["case"], c["cases"][0]["case"]);
}

TEST(Cli, ReplayOfTheCorpusPassesOnLowpAndReference) {
  const std::string d = scratch();
  for (const char* b : {"lowp", "reference"}) {
    Outcome r = dsa("replay " + q(kSource + "/cases") + " --backend " + b + " --report r.json", d);
    EXPECT_EQ(r.code, 0) << b << "\n" << r.out;
    EXPECT_EQ(read_json(d + "/r.json")["summary"]["cases"].get<int64_t>(), count_files(kSource + "/cases"));
  }
}

TEST(Cli, TimeBudgetRunsUntilTheBudget) {
  const std::string d = scratch();
  Outcome r = dsa("fuzz --backend lowp --profile smoke --time-budget 1 --corpus none --report r.json", d);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json rep = read_json(d + "/r.json");
  EXPECT_GE(rep["summary"]["cases"].get<int64_t>(), 1);
  EXPECT_LT(rep["context"]["seconds"].get<double>(), 10.0);
}

TEST(Cli, FailureGivesARepoLineThatReproduces) {
  const std::string d = scratch();
  Outcome r = dsa("DSA_REPRO_MARK=7 " + q(kBin) + " fuzz --backend mutant:kl_reversed --profile smoke --cases 4 "
                  "--corpus none --exec-timeout 77 --report out/r.json",
                  d, /*raw=*/true);
  ASSERT_EQ(r.code, 1) << r.out << r.err;
  const json rep = read_json(d + "/out/r.json");
  ASSERT_GE(rep["summary"]["failed"].get<int64_t>(), 1);
  const json* failing = nullptr;
  for (auto& c : rep["cases"])
    if (c["verdict"] == "fail") failing = &c;
  ASSERT_NE(failing, nullptr);
  EXPECT_EQ((*failing)["failure"]["stage"], "loss");
  EXPECT_EQ((*failing)["bucket"].get<std::string>().rfind("mutant:kl_reversed/loss/", 0), 0u);
  // The report's line: `dsa-parity repro CASE` with CASE relative to the report's folder.
  const std::string repro = (*failing)["repro"];
  const std::string prefix = "DSA_REPRO_MARK=7 dsa-parity repro r-cases/";
  ASSERT_EQ(repro.rfind(prefix, 0), 0u) << repro;
  EXPECT_NE((*failing)["case_file"].get<std::string>()[0], '/');
  // The terminal's line: the binary as invoked (absolute), the case path absolute, the DSA_*
  // environment that was set; it runs when pasted anywhere.
  const size_t at = r.out.find("repro: DSA_");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string here = r.out.substr(at + 7, r.out.find('\n', at) - at - 7);
  EXPECT_NE(here.find(" " + kBin + " repro /"), std::string::npos) << here;
  EXPECT_NE(here.find("DSA_REPRO_MARK=7 "), std::string::npos) << here;
  EXPECT_NE(here.find("--exec-timeout 77"), std::string::npos) << here;  // a non-default verdict option
  const cli_testing::ShellRun pasted = cli_testing::run_shell("cd / && " + here + " 2>&1");
  EXPECT_EQ(pasted.code, 1) << here << "\n" << pasted.out;
  EXPECT_NE(pasted.out.find("kl "), std::string::npos);
  EXPECT_NE(pasted.out.find("mismatch"), std::string::npos);
  // The report's line works from the report's folder.
  const std::string tail = repro.substr(prefix.size() - std::string("repro r-cases/").size());
  Outcome again = dsa("DSA_REPRO_MARK=7 " + q(kBin) + " " + tail, d + "/out", /*raw=*/true);
  EXPECT_EQ(again.code, 1) << again.out << again.err;
  // And the case itself is fine on the real code.
  EXPECT_EQ(dsa(tail.substr(0, tail.find(" --backend")) + " --backend lowp", d + "/out").code, 0);
  DSA_EXPECT_MATCHES_SCHEMA(rep, "report.schema.json");
}

TEST(Cli, RepeatRecordsEachTensorsLaterRunsInAValidReport) {
  const std::string d = scratch();
  Outcome r = dsa("fuzz --backend mutant:kl_reversed --profile smoke --cases 2 --corpus none --repeat 2 "
                  "--report r.json", d);
  ASSERT_EQ(r.code, 1) << r.out << r.err;
  const json rep = read_json(d + "/r.json");
  EXPECT_EQ(rep["context"]["repeat"], 2);
  int64_t records = 0;
  for (auto& c : rep["cases"])
    if (c["verdict"] == "fail")
      for (auto& t : c["tensors"]) {
        if (!t.contains("repeat")) continue;
        ++records;
        EXPECT_EQ(t["repeat"]["runs"], 2) << t["tensor"];
        EXPECT_EQ(t["repeat"]["rejudged"], 0) << t["tensor"];  // a CPU backend claims its top-k
      }
  EXPECT_GT(records, 0);
  DSA_EXPECT_MATCHES_SCHEMA(rep, "report.schema.json");
}

TEST(Cli, MaxfailStopsTheRunAndWritesTheReport) {
  const std::string d = scratch();
  Outcome r = dsa("fuzz --backend mutant:kl_reversed --profile smoke --cases 20 --corpus none --maxfail 2 "
                  "--report r.json --junit j.xml",
                  d);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("stopped after 2 failing cases (--maxfail 2)"), std::string::npos) << r.out;
  const json rep = read_json(d + "/r.json");
  EXPECT_EQ(rep["summary"]["failed"], 2);
  EXPECT_EQ(rep["summary"]["cases"], 2);  // the first two smoke cases fail on this mutant
  EXPECT_EQ(rep["summary"]["maxfail_reached"], true);
  EXPECT_NE(slurp(d + "/j.xml").find("failures=\"2\""), std::string::npos);
  DSA_EXPECT_MATCHES_SCHEMA(rep, "report.schema.json");
}

TEST(Cli, QuietPrintsTheSummaryAndReproLinesVerbosePrintsEveryCase) {
  const std::string d = scratch();
  Outcome quiet = dsa("fuzz --backend mutant:kl_reversed --profile smoke --cases 6 --corpus none -q", d);
  EXPECT_EQ(quiet.code, 1);
  EXPECT_EQ(quiet.out.find("oracle:"), std::string::npos) << quiet.out;
  EXPECT_EQ(quiet.out.find("random cases:"), std::string::npos) << quiet.out;
  EXPECT_EQ(quiet.out.find("  case "), std::string::npos) << quiet.out;  // no failure details
  EXPECT_NE(quiet.out.find("FAIL mutant:kl_reversed/loss/kl/mismatch  repro: "), std::string::npos) << quiet.out;
  EXPECT_NE(quiet.out.find("6 cases: "), std::string::npos) << quiet.out;
  EXPECT_NE(quiet.out.find("count  first"), std::string::npos) << quiet.out;
  Outcome verbose = dsa("fuzz --backend lowp --profile smoke --cases 5 --corpus none -v", d);
  EXPECT_EQ(verbose.code, 0);
  int lines = 0;
  for (size_t p = verbose.out.find("\nok   case "); p != std::string::npos; p = verbose.out.find("\nok   case ", p + 1))
    ++lines;
  EXPECT_EQ(lines, 5) << verbose.out;
  EXPECT_NE(verbose.out.find("worst margin e_f/(alpha*e_l+floor) per tensor"), std::string::npos) << verbose.out;
  EXPECT_EQ(dsa("fuzz --backend lowp --cases 1 -q -v", d).code, 2);
}

TEST(Cli, ProgressLinesOffATty) {
  const std::string d = scratch();
  Outcome r = dsa("fuzz --backend lowp --profile smoke --cases 8 --corpus none --progress-every 0.000001", d);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.err.find("progress: 8/8 cases, 8 passed, 0 failed, "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" cases/s, ETA 0 s"), std::string::npos) << r.err;
  Outcome none = dsa("fuzz --backend lowp --profile smoke --cases 3 --corpus none --progress-every 0", d);
  EXPECT_EQ(none.err.find("progress:"), std::string::npos) << none.err;
}

TEST(Cli, DiffListsNewFixedAndPersistingBucketsAndMarginMoves) {
  const std::string d = scratch();
  const std::string common = " --profile smoke --cases 6 --corpus none --seed 1";
  ASSERT_EQ(dsa("fuzz --backend mutant:kl_reversed" + common + " --report a.json", d).code, 1);
  ASSERT_EQ(dsa("fuzz --backend mutant:dq_missing_scale" + common + " --report b.json --html b.html", d).code, 1);
  Outcome r = dsa("diff a.json b.json", d);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("new         mutant:dq_missing_scale/"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fixed       mutant:kl_reversed/loss/kl/mismatch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("worst margin per tensor (A -> B)"), std::string::npos) << r.out;
  Outcome j = dsa("diff a.json a.json --json", d);
  ASSERT_EQ(j.code, 0) << j.err;
  const json same = json::parse(j.out);
  EXPECT_TRUE(same["new"].empty());
  EXPECT_TRUE(same["fixed"].empty());
  ASSERT_EQ(same["persisting"].size(), 1u);
  EXPECT_EQ(same["persisting"][0]["bucket"], "mutant:kl_reversed/loss/kl/mismatch");
  EXPECT_FALSE(same["margins"].empty());
  for (auto& m : same["margins"]) {
    if (m["change"].is_number()) {
      EXPECT_DOUBLE_EQ(m["change"].get<double>(), 1.0);
    }
  }
  EXPECT_EQ(dsa("diff a.json missing.json", d).code, 2);
  // The HTML page names every tensor of the report's margin table.
  const std::string html = slurp(d + "/b.html");
  for (auto& m : read_json(d + "/b.json")["summary"]["margins"])
    EXPECT_NE(html.find(m["tensor"].get<std::string>()), std::string::npos) << m["tensor"];
}

TEST(Cli, ReproPrintsEveryCheckedTensor) {
  const std::string d = scratch();
  Outcome r = dsa("repro " + q(kSource + "/cases/edge/relu_derivative_at_zero.json") +
                  " --backend mutant:relu_grad_one_at_zero --report r.json",
              d);
  ASSERT_EQ(r.code, 1) << r.out << r.err;
  for (const char* t : {"topk", "O_lat", "lse", "dW_UV", "dk_pe", "kl", "dq_I", "dk_I", "dw"})
    EXPECT_NE(r.out.find(std::string(" ") + t + " "), std::string::npos) << t;
  const json rep = read_json(d + "/r.json");
  EXPECT_EQ(rep["cases"][0]["failure"]["tensor"], "dq_I");
  EXPECT_EQ(rep["cases"][0]["failure"]["class"], "mismatch");
  EXPECT_EQ(rep["context"]["command"], "repro");
  EXPECT_EQ(rep["cases"][0]["name"], "relu_derivative_at_zero.json");  // its JUnit name: no machine path
}

TEST(Cli, ShrinkWritesASmallerCaseThatStillFails) {
  const std::string d = scratch();
  const std::string edge = kSource + "/cases/edge/unequal_counted_rows_cp2.json";
  Outcome r = dsa("shrink " + q(edge) + " --backend mutant:loss_per_rank_mean --out s.json", d);
  ASSERT_EQ(r.code, 1) << r.out << r.err;
  const Case before = load_case(edge), after = load_case(d + "/s.json");
  auto tp = [](const Case& c) { return make_layout(c.problem.seqlens, c.problem.cp, c.problem.pad_rows).tp; };
  EXPECT_LE(tp(after), tp(before));
  EXPECT_GT(after.problem.cp.size, 1);  // the bug needs CP
  EXPECT_NE(after.note.find("shrunk from"), std::string::npos);
  EXPECT_EQ(dsa("repro s.json --backend mutant:loss_per_rank_mean", d).code, 1);
  EXPECT_EQ(dsa("repro s.json --backend lowp", d).code, 0);
  // A passing case has nothing to shrink.
  EXPECT_EQ(dsa("shrink " + q(edge) + " --backend lowp --out t.json", d).code, 0);
  EXPECT_FALSE(fs::exists(d + "/t.json"));
}

TEST(Cli, CrashingExecBackendIsAFailureWithItsMessage) {
  const std::string d = scratch();
  Outcome r = dsa("repro " + q(kSource + "/cases/edge/shorter_than_k.json") + " --backend 'exec:false' --report r.json", d);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json rep = read_json(d + "/r.json");
  EXPECT_EQ(rep["cases"][0]["failure"]["class"], "crash");
  EXPECT_EQ(rep["cases"][0]["bucket"].get<std::string>().find("/run/-/crash"), std::string("exec:false").size());
}

TEST(Cli, ExecBackendPastItsTimeLimitIsATimeout) {
  const std::string d = scratch();
  Outcome r = dsa("repro " + q(kSource + "/cases/edge/shorter_than_k.json") +
                      " --backend 'exec:sleep 20 #' --exec-timeout 0.5 --report r.json",
                  d);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json rep = read_json(d + "/r.json");
  EXPECT_EQ(rep["cases"][0]["failure"]["class"], "timeout");
}

// --case-timeout is the in-process limit, and it holds for an exec: backend too: the stuck case
// fails as the backend's timeout, with its case file and a repro line that carries the limit, and
// the command still running is killed with the session.
TEST(Cli, CaseTimeoutFailsAStuckBackendRunAndKillsItsCommand) {
  const std::string d = scratch();
  const auto t0 = std::chrono::steady_clock::now();
  Outcome r = dsa("fuzz --backend 'exec:sleep 31.25 #' --case-timeout 1 --cases 2 --corpus none --report r.json", d);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_LT(took, 20) << "given up soon after --case-timeout, not at the command's own end";
  const json rep = read_json(d + "/r.json");
  ASSERT_EQ(rep["cases"].size(), 1u) << rep.dump(1);
  const json& c = rep["cases"][0];
  EXPECT_EQ(c["failure"]["class"], "timeout");
  EXPECT_EQ(c["bucket"], "exec:sleep 31.25 #/run/-/timeout");
  EXPECT_TRUE(std::filesystem::exists(d + "/" + c.value("case_file", "?"))) << c.dump(1);
  EXPECT_NE(c.value("repro", "").find("--case-timeout 1"), std::string::npos) << c.dump(1);
  // No process left whose command line is the backend's (read from /proc: no pgrep needed).
  bool alive = false;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream f(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), {});
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    alive |= cmd.rfind("sleep 31.25", 0) == 0;
  }
  EXPECT_FALSE(alive) << "the backend's command outlived the session";
}

TEST(Cli, FuzzThroughTheExecProtocolChecksEveryTensor) {
  const std::string d = scratch();
  const std::string worker = "exec:" + kBin + " exec-worker --backend ";
  Outcome r = dsa("fuzz --backend " + q(worker + "lowp") + " --profile smoke --cases 4 --corpus none --report r.json", d);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json rep = read_json(d + "/r.json");
  for (auto& c : rep["cases"]) {
    EXPECT_EQ(c["verdict"], "pass");
    EXPECT_GE(c["margins"].size(), 15u);  // every tensor checked (compact records list the checked ones)
  }
  // A planted bug behind the protocol is found like an in-process one.
  EXPECT_EQ(dsa("repro " + q(kSource + "/cases/edge/kl_direction_dense.json") + " --backend " +
                    q(worker + "mutant:kl_reversed"),
                d)
                .code,
            1);
}

TEST(Cli, CudaWithoutADeviceCannotRun) {
  if (cuda_device_present()) GTEST_SKIP() << "a GPU is present";
  const std::string d = scratch();
  Outcome r = dsa("fuzz --backend cuda --profile smoke --cases 1", d);
  EXPECT_EQ(r.code, 3) << r.out << r.err;
}

// The MLA paths of fuzz's random cases (--path): recorded in the header line and the report.
TEST(Cli, FuzzPathFlagRestrictsRandomCasesAndRecordsThem) {
  const std::string d = scratch();
  const std::string base = "fuzz --backend lowp --profile smoke --seed 1 --cases 8 --corpus none ";
  Outcome r = dsa(base + "--path absorbed --report a.json", d);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("random cases: profile smoke, seed 1, paths absorbed (--path absorbed)"), std::string::npos)
      << r.out;
  const json a = read_json(d + "/a.json");
  EXPECT_EQ(a["context"]["paths"], json::array({"absorbed"}));
  ASSERT_EQ(a["cases"].size(), 8u);
  for (auto& c : a["cases"]) EXPECT_EQ(c["case"]["path"], "absorbed") << c["description"];
  // By default lowp's paths: both, and smoke seed 1 draws explicit cases among its first 8.
  r = dsa(base + "--report b.json", d);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("paths absorbed+explicit\n"), std::string::npos) << r.out;
  const json b = read_json(d + "/b.json");
  EXPECT_EQ(b["context"]["paths"], json::array({"absorbed", "explicit"}));
  int64_t explicit_cases = 0;
  for (auto& c : b["cases"]) explicit_cases += c["case"]["path"] == "explicit";
  EXPECT_GT(explicit_cases, 0);
  r = dsa(base + "--path explicit --report c.json", d);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // (bound first: a range-for over a member of a temporary reads freed memory before C++23)
  const json c_report = read_json(d + "/c.json");
  for (auto& c : c_report["cases"]) EXPECT_EQ(c["case"]["path"], "explicit") << c["description"];
  // replay draws no random case: null.
  r = dsa("replay " + q(kSource + "/cases/edge/shorter_than_k.json") + " --backend lowp --report e.json", d);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(read_json(d + "/e.json")["context"]["paths"].is_null());
  DSA_EXPECT_MATCHES_SCHEMA(a, "report.schema.json");
}

TEST(Cli, BadPathIsExitTwoNamingPath) {
  const std::string d = scratch();
  // Bad usage before the backend is made: exit 2 even where cuda could not run (exit 3).
  for (const char* args : {"fuzz --backend lowp --path bogus --cases 1", "fuzz --backend cuda --path bogus --cases 1",
                           "fuzz --backend lowp --path= --cases 1"}) {
    Outcome r = dsa(args, d);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("--path"), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

// On a GPU: cuda implements the absorbed path only, so fuzz draws absorbed cases only and a run
// without failures exits 0 (it exited 3, every explicit case being cannot-run).
TEST(Cli, CudaFuzzDrawsAbsorbedOnly) {
  if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  const std::string d = scratch();
  // With the corpus: its explicit case is not selected, so the run exits 0.
  Outcome r = dsa("fuzz --backend cuda --profile smoke --seed 1 --cases 8 --report r.json", d);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("paths absorbed (backend cuda implements absorbed only)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("corpus case not selected"), std::string::npos) << r.out;
  const json rep = read_json(d + "/r.json");
  EXPECT_EQ(rep["context"]["paths"], json::array({"absorbed"}));
  EXPECT_FALSE(rep["context"]["not_selected"].empty());
  for (auto& c : rep["cases"]) EXPECT_EQ(c["case"]["path"], "absorbed") << c["description"];
  for (const char* path : {"explicit", "any"}) {
    r = dsa(std::string("fuzz --backend cuda --profile smoke --cases 1 --corpus none --path ") + path, d);
    EXPECT_EQ(r.code, 2) << path << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("--path: backend cuda implements absorbed only"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST(Cli, BadUsageIsExitTwoWithOneLineNamingTheField) {
  const std::string d = scratch();
  const std::string malformed = kSource + "/cases/malformed/topk_zero.json";
  const std::pair<std::string, std::string> bad[] = {
      {"fuzz --bogus", "--bogus"},
      {"fuzz --backend nonsense --cases 1", "backend"},
      {"fuzz --backend mutant:nonsense --cases 1", "backend"},
      {"fuzz --backend lowp --profile huge", "--profile"},
      {"fuzz --backend lowp --cases 2 --time-budget 3", "--cases"},
      {"fuzz --backend lowp --cases -1", "--cases"},
      {"fuzz --backend lowp --time-budget 0", "--time-budget"},
      {"fuzz --backend lowp --seed x", "--seed"},
      {"fuzz --backend lowp --exec-timeout 0", "--exec-timeout"},
      {"fuzz --backend lowp --case-timeout 0", "--case-timeout"},
      {"replay " + q(d) + " --backend lowp --case-timeout -3", "--case-timeout"},
      {"fuzz --backend lowp --time-budget 0x10", "--time-budget"},  // hex is not a number of seconds
      {"fuzz --backend lowp --time-budget ' 5'", "--time-budget"},
      {"fuzz --backend lowp --exec-timeout inf", "--exec-timeout"},
      {"fuzz --backend lowp --corpus /nonexistent/dir", "--corpus"},
      {"replay /nonexistent/dir --backend lowp", "DIR"},
      {"replay " + q(d) + " --backend lowp", "DIR"},
      {"repro --backend lowp", "CASE.json"},
      {"repro /nonexistent.json --backend lowp", "CASE.json"},
      {"repro " + q(malformed) + " --backend lowp", "topk"},
      {"shrink " + q(malformed) + " --backend lowp", "topk"},
  };
  for (auto& [args, field] : bad) {
    Outcome r = dsa(args, d);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(field), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

// ---- the command line itself (CLI11, tools/command.hpp)

// The long flags (and -h) a help text lists: its option lines start with them.
std::set<std::string> flags_in_help(const std::string& help) {
  std::set<std::string> out;
  static const std::regex option_line(R"(^  (-[A-Za-z],)?(--[A-Za-z0-9_-]+))");
  std::istringstream lines(help);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_search(line, m, option_line)) out.insert(m[2]);
  }
  return out;
}

// The flags each subcommand registers, from the same CLI11 application the binary builds.
std::map<std::string, std::set<std::string>> registered_flags() {
  std::map<std::string, std::set<std::string>> out;
  const cli::Cli c = cli::make_cli();
  for (const CLI::App* sub : c.app->get_subcommands({})) {
    auto& flags = out[sub->get_name()];
    for (const CLI::Option* o : sub->get_options())
      for (const std::string& l : o->get_lnames()) flags.insert("--" + l);
  }
  return out;
}

TEST(Cli, HelpOfEverySubcommandListsEveryFlagItRegisters) {
  const std::string d = scratch();
  const auto registered = registered_flags();
  ASSERT_GE(registered.size(), 11u);  // ten subcommands and help
  for (const auto& [name, flags] : registered) {
    ASSERT_TRUE(flags.count("--help")) << name;
    const Outcome by_help = dsa("help " + name, d), by_flag = dsa(name + " --help", d), short_flag = dsa(name + " -h", d);
    ASSERT_EQ(by_help.code, 0) << name << ": " << by_help.err;
    EXPECT_EQ(by_flag.code, 0) << name << ": " << by_flag.err;
    EXPECT_EQ(short_flag.code, 0) << name << ": " << short_flag.err;
    EXPECT_EQ(by_help.out, by_flag.out) << name;
    EXPECT_EQ(by_help.out, short_flag.out) << name;
    EXPECT_TRUE(by_help.err.empty()) << name << ": " << by_help.err;
    EXPECT_EQ(flags_in_help(by_help.out), flags) << name << ":\n" << by_help.out;
    EXPECT_NE(by_help.out.find("Usage: dsa-parity " + name), std::string::npos) << by_help.out;
    EXPECT_NE(by_help.out.find("Example:\n  dsa-parity "), std::string::npos) << name << ":\n" << by_help.out;
  }
  // Every flag has help text; those with a default show it.
  const cli::Cli c = cli::make_cli();
  for (const CLI::App* sub : c.app->get_subcommands({}))
    for (const CLI::Option* o : sub->get_options()) EXPECT_FALSE(o->get_description().empty()) << o->get_name();
  // The flags of README "Command line" are all still there.
  const std::set<std::string> limits = {"--max-bytes", "--max-pairs"};
  auto with = [](std::set<std::string> a, const std::set<std::string>& b) {
    a.insert(b.begin(), b.end());
    a.insert("--help");
    return a;
  };
  const std::set<std::string> session =
      with(limits, {"--backend", "--oracle", "--comm", "--exec-timeout", "--rank-timeout", "--report", "--junit", "--require-device",
                    "--html", "--maxfail", "--keep-worst", "--progress-every", "--quiet", "--verbose", "--repeat",
                    "--case-timeout"});
  EXPECT_EQ(registered.at("fuzz"),
            with(session, {"--seed", "--cases", "--time-budget", "--profile", "--corpus", "--path", "--cp", "--shrink", "--shard"}));
  EXPECT_EQ(registered.at("repro"), with(session, {}));
  EXPECT_EQ(registered.at("replay"), with(session, {"--shard"}));
  EXPECT_EQ(registered.at("merge"), with({}, {"--out", "--junit", "--html", "--keep-worst"}));
  EXPECT_EQ(registered.at("shrink"), with(limits, {"--backend", "--out", "--time-budget", "--comm"}));
  EXPECT_EQ(registered.at("export"), with(limits, {"--out", "--backend", "--comm"}));
  EXPECT_EQ(registered.at("exec-worker"), with(limits, {"--backend"}));
  EXPECT_EQ(registered.at("layout"), with(limits, {"--seqlens", "--cp", "--layout", "--pad-multiple", "--json"}));
  EXPECT_EQ(registered.at("catalogue"), with({}, {"--json"}));
  EXPECT_EQ(registered.at("mutants"), with({}, {"--json"}));
  // The defaults are shown.
  const std::string fuzz = dsa("help fuzz", d).out;
  for (const char* shown : {"--seed S=1", "--profile smoke|default|nightly|production=default", "--backend B=auto",
                            "--oracle cpu|gpu|both|auto=cpu", "--comm nccl|local|auto|mpi=auto", "--path absorbed|explicit|any|auto=auto",
                            "--exec-timeout SEC=600", "--rank-timeout SEC=300", "--max-pairs N=2147483648", "--repeat N=1",
                            "--case-timeout SEC=none"})
    EXPECT_NE(fuzz.find(shown), std::string::npos) << shown << "\n" << fuzz;
}

TEST(Cli, TopLevelHelpListsEverySubcommand) {
  const std::string d = scratch();
  for (const char* args : {"--help", "-h", "help"}) {
    const Outcome r = dsa(args, d);
    EXPECT_EQ(r.code, 0) << args << ": " << r.err;
    for (const auto& [name, flags] : registered_flags())
      EXPECT_NE(r.out.find("\n  " + name + " "), std::string::npos) << args << ": " << name << "\n" << r.out;
    EXPECT_NE(r.out.find("--version"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("exit codes: 0 all passed"), std::string::npos) << r.out;
  }
  // No subcommand: the same list on stderr, exit 2; an unknown one: one line naming it.
  const Outcome none = dsa("", d);
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("Subcommands:"), std::string::npos) << none.err;
  for (const std::pair<const char*, const char*> bad[] = {{"bogus", "dsa-parity: error: subcommand: unknown 'bogus'"},
                                                          {"--bogus", "dsa-parity: error: --bogus: unknown flag"},
                                                          {"help bogus", "dsa-parity help: error: NAME: unknown"}};
       auto& [args, line] : bad) {
    const Outcome r = dsa(args, d);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err.rfind(line, 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

TEST(Cli, HelpAnywhereOnTheLinePrintsTheSubcommandsHelp) {
  const std::string d = scratch();
  // Before and after other flags, after bad values and unknown flags (help wins over bad usage).
  for (const std::pair<std::string, std::string> line[] = {
           {"fuzz --backend lowp --help", "fuzz"},
           {"fuzz --profile nonsense --cases 0 --help", "fuzz"},
           {"fuzz --bogus -h", "fuzz"},
           {"repro no-such.json --backend lowp --help", "repro"},
           {"replay cases --help --report r.json", "replay"},
           {"layout --seqlens 5,11 --help --json", "layout"},
           {"shrink x.json --help", "shrink"},
           {"bench --benchmark_filter=Fused --help", "bench"}};
       auto& [args, name] : line) {
    const Outcome r = dsa(args, d);
    EXPECT_EQ(r.code, 0) << args << ": " << r.err;
    EXPECT_NE(r.out.find("Usage: dsa-parity " + name + " "), std::string::npos) << args << ":\n" << r.out;
    EXPECT_EQ(r.out, dsa("help " + name, d).out) << args;
  }
  EXPECT_FALSE(fs::exists(d + "/r.json"));  // nothing ran
}

TEST(Cli, VersionPrintsTheProjectVersionAndTheGitSha) {
  const std::string d = scratch();
  auto version = [&](const std::string& env) {
    return cli_testing::run_shell("cd " + q(d) + " && env " + env + " " + q(kBin) + " --version 2>&1");
  };
  const cli_testing::ShellRun r = version("-u DSA_GIT_SHA");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::regex format("dsa-parity " + std::regex_replace(std::string(DSA_PROJECT_VERSION), std::regex("\\."), "\\.") +
                          " \\(git ([0-9a-f]{40}(-dirty)?|unknown)\\)\n");
  EXPECT_TRUE(std::regex_match(r.out, format)) << r.out;
  // $DSA_GIT_SHA (a device machine's copy has no .git) names the commit at run time.
  EXPECT_EQ(version("DSA_GIT_SHA=0123abc").out, std::string("dsa-parity ") + DSA_PROJECT_VERSION + " (git 0123abc)\n");
}

TEST(Cli, BogusEnumValuesAreExitTwoNamingTheFlag) {
  const std::string d = scratch();
  const std::pair<std::string, std::string> bad[] = {
      {"fuzz --backend lowp --comm bogus --cases 1", "--comm: must be one of nccl|local|auto|mpi, got 'bogus'"},
      {"fuzz --backend lowp --profile x --cases 1", "--profile: must be one of smoke|default|nightly|production, got 'x'"},
      {"fuzz --backend lowp --oracle x --cases 1", "--oracle: must be one of cpu|gpu|both|auto, got 'x'"},
      {"fuzz --backend lowp --path x --cases 1", "--path: must be one of absorbed|explicit|any|auto, got 'x'"},
      {"repro x.json --oracle x", "--oracle: must be one of cpu|gpu|both|auto"},
      {"replay cases --comm x", "--comm: must be one of"},
      {"shrink x.json --comm x", "--comm: must be one of"},
      {"layout --seqlens 5 --layout zig", "--layout: must be one of zigzag|contiguous, got 'zig'"},
      {"bench --benchmark_format=yaml", "--benchmark_format: must be one of console|json|csv"},
#ifdef DSA_HAVE_MPI
      // mpi runs the CPU reference backends and cuda, one process per CP rank; cuda needs NCCL too
      // (tools/mpi_cli_test.cpp runs it where it is built: without a device, exit 3).
#if !defined(DSA_HAVE_CUDA) || !defined(DSA_HAVE_NCCL)
      {"fuzz --backend cuda --comm mpi --cases 1 --corpus none", "--comm: mpi with backend cuda needs CUDA and NCCL"},
#endif
      {"fuzz --backend exec:true --comm mpi --cases 1 --corpus none", "--comm: mpi runs the CPU reference backends"},
#else
      // mpi is a known communicator, refused in a build without Open MPI.
      {"fuzz --backend lowp --comm mpi --cases 1 --corpus none", "--comm: mpi is not available in this build"},
      {"fuzz --backend cuda --comm mpi --cases 1 --corpus none", "--comm: mpi is not available in this build"},
#endif
      // --require-device does not hide bad usage.
      {"fuzz --backend lowp --require-device --profile x", "--profile: must be one of"},
      {"fuzz --backend lowp --cases", "--cases: needs a value"},
      {"catalogue --json=yes", "--json: is a switch and takes no value"},
  };
  for (auto& [args, line] : bad) {
    const Outcome r = dsa(args, d);
    const std::string cmd = args.substr(0, args.find(' '));
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out << r.err;
    EXPECT_EQ(r.err.rfind("dsa-parity " + cmd + ": error: " + line, 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

TEST(Cli, RequireDeviceWithoutADeviceIsExitThree) {
  if (cuda_device_present()) GTEST_SKIP() << "a GPU is present";
  const std::string d = scratch();
  for (const std::string& args : {std::string("fuzz --backend lowp --require-device --cases 1 --corpus none --report r.json"),
                                 "repro " + q(kSource + "/cases/edge/shorter_than_k.json") + " --backend lowp --require-device",
                                 "replay " + q(kSource + "/cases/edge") + " --require-device --backend reference"}) {
    const Outcome r = dsa(args, d);
    const std::string cmd = args.substr(0, args.find(' '));
    EXPECT_EQ(r.code, 3) << args << "\n" << r.out << r.err;
    EXPECT_EQ(r.err.rfind("dsa-parity " + cmd + ": cannot run here: --require-device: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.out.find("case"), std::string::npos) << "no case ran: " << r.out;
  }
  // Without the flag the same run goes ahead on lowp, and --backend auto says it chose lowp.
  EXPECT_EQ(dsa("fuzz --backend lowp --cases 1 --corpus none --profile smoke", d).code, 0);
  const Outcome r = dsa("fuzz --cases 1 --corpus none --profile smoke", d);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("backend: lowp (--backend auto: no CUDA device)\n", 0), 0u) << r.out;
}

TEST(Cli, BenchOfGpuBenchmarksWithoutADeviceIsExitThree) {
  if (cuda_device_present()) GTEST_SKIP() << "a GPU is present";
  const std::string d = scratch();
  for (const char* filter : {"Fused", "BM_FusedAttentionForward", "."}) {
    const Outcome r = dsa(std::string("bench --benchmark_filter=") + filter, d);
    EXPECT_EQ(r.code, 3) << filter << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("selects GPU benchmarks"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("no CUDA device"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // The CPU reference's benchmarks are there without a device (listed, not run: they take minutes).
  const Outcome r = dsa("bench --benchmark_filter=Reference --benchmark_list_tests", d);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ReferenceForward/S:256"), std::string::npos) << r.out;
  EXPECT_EQ(dsa("bench --benchmark_filter=-Fused --benchmark_list_tests", d).code, 0);
  EXPECT_EQ(dsa("bench --benchmark_nonsense=1", d).code, 2);
}

// Every malformed case file of the corpus, through the CLI: the manifest's exit code, and for
// exit 2 one line on stderr that names the offending field (cases/malformed/expected.tsv; the
// full corpus test with file-system oddities and deadlines is tools/malformed_corpus_test.cpp).
TEST(Cli, EveryMalformedCaseFileIsExitTwoNamingItsField) {
  const std::string d = scratch();
  const std::string dir = kSource + "/cases/malformed/";
  std::ifstream expected(dir + "expected.tsv");
  std::string line;
  int checked = 0;
  while (std::getline(expected, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string file, field;
    int code = -1;
    std::getline(fields, file, '\t');
    fields >> code;
    fields.ignore(1);
    std::getline(fields, field);
    if (code != 2) continue;
    Outcome r = dsa("repro " + q(dir + file) + " --backend lowp", d);
    EXPECT_EQ(r.code, 2) << file << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(field), std::string::npos) << file << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << file << ": " << r.err;
    ++checked;
  }
  EXPECT_GE(checked, 100);
}

}  // namespace cli_test
}  // namespace
}  // namespace dsa
