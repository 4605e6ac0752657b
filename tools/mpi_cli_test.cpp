// `--comm mpi` as a user runs it: `mpirun -np N --oversubscribe dsa-parity fuzz|replay ...`, one
// process per CP rank (built only with Open MPI). The lowp backend passes on 2, 3 and 4 ranks; the
// results equal the in-process run's bit for bit; the exchange's planted bugs are caught across
// processes; a rank that crashes, hangs or disagrees ends the run within its deadline, never with
// a pass, and the output and the report name the rank. Skipped, saying why, without mpirun.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/backend.hpp"
#ifdef DSA_HAVE_CUDA
#include "fused/device.hpp"
#endif
#include "harness/case.hpp"
#include "harness/exec_protocol.hpp"
#include "harness/run_case.hpp"
#include "harness/schema_testing.hpp"
#include "tools/shell_testing.hpp"

namespace dsa {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using cli_testing::slurp;

const std::string kBin = DSA_PARITY_BIN;
const std::string kCases = std::string(DSA_SOURCE_DIR) + "/cases";

std::string q(const std::string& s) { return cli_testing::shell_quote(s); }

struct Timed {
  int code = -1;
  std::string out;
  double seconds = 0;
};

// Runs a shell line in dir, stdout and stderr together, timing it.
Timed run_in(const std::string& dir, const std::string& line) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = cli_testing::run_shell("cd " + q(dir) + " && " + line + " 2>&1");
  return {r.code, r.out, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

// Open MPI's session folders of this test process: concurrent mpirun jobs sharing one (ctest -j)
// remove it under each other ("A call to mkdir was unable to create the desired directory").
struct SessionRoot {
  std::string dir = "/tmp/dsa-ompi-" + std::to_string(getpid());  // short: PMIx puts sockets in it
  SessionRoot() { fs::create_directories(dir); }
  ~SessionRoot() { fs::remove_all(dir); }
};

// The MPI launcher, or "" when there is none. As root, Open MPI's mpirun refuses to run unless
// told twice: the two variables go on its line.
std::string mpirun(int np) {
  static const SessionRoot session;
  const std::string exe = DSA_MPIEXEC;
  if (exe.empty() || access(exe.c_str(), X_OK) != 0) return "";
  const std::string root = geteuid() == 0 ? "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " : "";
  return root + "OMPI_MCA_orte_tmpdir_base=" + q(session.dir) + " " + q(exe) + " -np " + std::to_string(np) +
         " --oversubscribe";
}

#define REQUIRE_MPIRUN()                                                                                 \
  if (mpirun(1).empty())                                                                                 \
  GTEST_SKIP() << "no MPI launcher (mpirun) at '" DSA_MPIEXEC "': install openmpi-bin to run the --comm " \
                  "mpi tests"

json report_at(const std::string& path) { return json::parse(slurp(path)); }

// A report record's cp (compact records leave out fields at their defaults: cp 1).
int64_t cp_of(const json& record) {
  const json& c = record.at("case");
  return c.contains("cp") ? c.at("cp").value("size", int64_t{1}) : 1;
}

TEST(MpiFuzz, LowpPassesOnTwoThreeAndFourRanks) {
  REQUIRE_MPIRUN();
  const std::string d = cli_testing::scratch("dsa-mpi");
  json rep;
  for (int np : {2, 3, 4}) {
    SCOPED_TRACE("np " + std::to_string(np));
    const std::string report = "r" + std::to_string(np) + ".json";
    const Timed r = run_in(d, mpirun(np) + " " + q(kBin) + " fuzz --backend lowp --comm mpi --profile smoke --cases 6 " +
                                  "--corpus " + q(kCases) + " --report " + report + " --junit j.xml");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("cp " + std::to_string(np) + " only (the MPI world size)"), std::string::npos) << r.out;
    rep = report_at(d + "/" + report);
    EXPECT_EQ(rep["context"]["comm"], "mpi");
    EXPECT_EQ(rep["context"]["world_size"], np);
    EXPECT_TRUE(rep["summary"]["rank_failure"].is_null());
    EXPECT_GE(rep["summary"]["passed"].get<int64_t>(), 6);
    for (const json& c : rep.at("cases")) EXPECT_EQ(cp_of(c), np) << c.at("description");
    // Corpus cases of another cp are listed, not run.
    EXPECT_FALSE(rep["context"]["not_selected"].empty());
    EXPECT_NE(r.out.find("not " + std::to_string(np) + ", the MPI world size"), std::string::npos) << r.out;
  }
  DSA_EXPECT_MATCHES_SCHEMA(rep, "report.schema.json");
}

// Every tensor of a, b: shapes and bits.
void expect_same_bits(const Result& a, const Result& b, const std::string& what) {
  EXPECT_EQ(a.topk.shape, b.topk.shape) << what;
  EXPECT_EQ(a.topk.data, b.topk.data) << what << ": topk";
  ASSERT_EQ(a.scores.has_value(), b.scores.has_value()) << what;
  int compared = 0;
  a.for_each_float([&](const std::string& name, const TensorD& t) {
    TensorD u;
    b.for_each_float([&](const std::string& n, const TensorD& x) {
      if (n == name) u = x;
    });
    EXPECT_EQ(t.shape, u.shape) << what << ": " << name;
    if (t.shape == u.shape && !t.data.empty()) {
      EXPECT_EQ(std::memcmp(t.data.data(), u.data.data(), t.data.size() * sizeof(double)), 0) << what << ": " << name;
    }
    compared += !t.data.empty();
  });
  EXPECT_GE(compared, 3) << what;
}

TEST(MpiFuzz, ResultsEqualTheInProcessRunBitForBit) {
  REQUIRE_MPIRUN();
  const std::string d = cli_testing::scratch("dsa-mpi");
  // The mutant fails (exit 1), which is the point: its wrong results are the same bits too.
  for (const std::string backend : {"lowp", "reference", "mutant:loss_count_rank_left_out"}) {
    SCOPED_TRACE(backend);
    const std::string dump = d + "/" + backend.substr(0, 4);
    fs::create_directories(dump);
    const Timed r = run_in(d, "DSA_TEST_MPI_DUMP=" + q(dump) + " " + mpirun(3) + " " + q(kBin) + " fuzz --backend " +
                                  backend + " --comm mpi --profile smoke --cases 8 --corpus " + q(kCases) + " -q");
    ASSERT_EQ(r.code, backend[0] == 'm' ? 1 : 0) << r.out;
    // In process, the ranks on threads: --comm local (for reference, sharded exact; lowp and the
    // mutants always shard), on the very cases the MPI run sent.
    BackendOptions local;
    local.comm = "local";
    const auto in_process = make_backend(backend, local);
    int cases = 0;
    for (int64_t seq = 0; fs::exists(dump + "/case-" + std::to_string(seq) + ".json"); ++seq, ++cases) {
      const Case c = load_case(dump + "/case-" + std::to_string(seq) + ".json");
      const Result over_mpi = exec::read_outputs(dump + "/result-" + std::to_string(seq) + ".safetensors", c);
      expect_same_bits(over_mpi, in_process->run(c, prepare_case(c)).result, describe(c));
    }
    EXPECT_GE(cases, 8);
  }
}

struct MutantCase {
  const char* name;
};
void PrintTo(const MutantCase& m, std::ostream* os) { *os << m.name; }

class ExchangeMutant : public ::testing::TestWithParam<MutantCase> {};

TEST_P(ExchangeMutant, CaughtOnTwoThreeAndFourRanks) {
  REQUIRE_MPIRUN();
  const std::string d = cli_testing::scratch("dsa-mpi");
  for (int np : {2, 3, 4}) {
    const Timed r = run_in(d, mpirun(np) + " " + q(kBin) + " fuzz --backend mutant:" + GetParam().name +
                                  " --comm mpi --profile smoke --cases 16 --corpus none -q --maxfail 1");
    EXPECT_EQ(r.code, 1) << "np " << np << "\n" << r.out;
    EXPECT_NE(r.out.find("FAIL mutant:" + std::string(GetParam().name)), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("repro: mpirun -np " + std::to_string(np) + " "), std::string::npos) << r.out;
  }
}

INSTANTIATE_TEST_SUITE_P(Mpi, ExchangeMutant,
                         ::testing::Values(MutantCase{"allgather_rank_order_scrambled"},
                                           MutantCase{"zigzag_send_halves_swapped"},
                                           MutantCase{"loss_count_rank_left_out"}),
                         [](const ::testing::TestParamInfo<MutantCase>& i) { return std::string(i.param.name); });

struct Fault {
  const char* kind;
  const char* planted;  // DSA_TEST_MPI_FAULT
  int rank;             // the rank the report must name
  const char* how;      // summary.rank_failure.how
  const char* says;     // in the output
};
void PrintTo(const Fault& f, std::ostream* os) { *os << f.kind; }

class RankFault : public ::testing::TestWithParam<Fault> {};

TEST_P(RankFault, EndsTheRunWithinItsDeadlineNamingTheRank) {
  REQUIRE_MPIRUN();
  const Fault& f = GetParam();
  const std::string d = cli_testing::scratch("dsa-mpi");
  const double timeout = 3;
  const Timed r = run_in(d, "DSA_TEST_MPI_FAULT=" + std::string(f.planted) + " " + mpirun(3) + " " + q(kBin) +
                                " fuzz --backend lowp --comm mpi --profile smoke --cases 6 --corpus none --rank-timeout 3" +
                                " --report r.json --junit j.xml");
  EXPECT_NE(r.code, 0) << r.out;  // never a pass
  EXPECT_LT(r.seconds, timeout + 20) << r.out;
  const std::string rank = "rank " + std::to_string(f.rank);
  const bool terminated = std::string(f.how) == "terminated";
  EXPECT_NE(r.out.find(f.says), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(d + "/r.json")) << "rank 0 wrote no report\n" << r.out;
  const json rep = report_at(d + "/r.json");
  const json& failure = rep["summary"]["rank_failure"];
  ASSERT_TRUE(failure.is_object()) << rep["summary"].dump();
  EXPECT_EQ(failure["how"], f.how);
  if (terminated) {
    // A rank that died without a word is among those rank 0 still awaited (named first when the
    // others' progress notes came in time: usually, not on a loaded machine).
    EXPECT_TRUE(std::regex_search(failure["message"].get<std::string>(),
                                  std::regex("waiting for ranks? ([0-9]+, )*" + std::to_string(f.rank) + "\\b")))
        << failure;
  } else {
    EXPECT_NE(r.out.find("stopped: " + rank + " " + f.how), std::string::npos) << r.out;
    EXPECT_EQ(failure["rank"], f.rank);
    EXPECT_NE(failure["message"].get<std::string>().find(rank), std::string::npos) << failure;
  }
  EXPECT_NE(rep["summary"]["exit_code"], 0);
  EXPECT_EQ(rep["summary"]["passed"], rep["summary"]["cases"].get<int64_t>() - rep["summary"]["failed"].get<int64_t>());
  // The case it happened in is a failure naming the rank (a start handshake or a silent death
  // fails no case: the run ran none, or was interrupted).
  if (!terminated && std::string(f.kind) != "hello") {
    EXPECT_EQ(rep["summary"]["failed"], 1);
    const json& last = rep["cases"].back();
    EXPECT_EQ(last["verdict"], "fail");
    EXPECT_NE(last["message"].get<std::string>().find(rank), std::string::npos) << last["message"];
    EXPECT_NE(slurp(d + "/j.xml").find(rank), std::string::npos);
  }
  EXPECT_NE(slurp(d + "/j.xml").find("rank_failure"), std::string::npos);
  DSA_EXPECT_MATCHES_SCHEMA(rep, "report.schema.json");
}

INSTANTIATE_TEST_SUITE_P(
    Mpi, RankFault,
    ::testing::Values(Fault{"exit", "1:2:exit", 1, "crash", "exit(3) before the run ended"},
                      Fault{"abort", "1:2:abort", 1, "crash", "killed by SIGABRT"},
                      Fault{"segv", "2:1:segv", 2, "crash", "killed by SIGSEGV"},
                      Fault{"error", "1:0:error", 1, "crash", "planted error"},
                      Fault{"hang", "1:2:hang", 1, "timeout", "timed out after 3 s (--rank-timeout)"},
                      Fault{"rank0_hang", "0:1:hang", 0, "timeout", "rank 1 inside collective 1 (allgather)"},
                      Fault{"seed", "2:3:seed", 2, "disagree", "disagrees with rank 0 on the case"},
                      Fault{"hello", "1:0:hello", 1, "disagree", "disagrees with rank 0 at the start"},
                      Fault{"kill", "2:1:kill", 2, "terminated", "the launcher is ending the job"}),
    [](const ::testing::TestParamInfo<Fault>& i) { return std::string(i.param.kind); });

TEST(MpiSession, WithoutALauncherItIsOneRank) {
  const std::string d = cli_testing::scratch("dsa-mpi");
  const Timed r = run_in(d, q(kBin) + " fuzz --backend lowp --comm mpi --profile smoke --cases 3 --corpus none --report r.json");
  ASSERT_EQ(r.code, 0) << r.out;
  const json rep = report_at(d + "/r.json");
  EXPECT_EQ(rep["context"]["world_size"], 1);
  for (const json& c : rep.at("cases")) EXPECT_EQ(cp_of(c), 1);
}

TEST(MpiSession, ACaseOfAnotherCpCannotRunNamingTheWorldSize) {
  REQUIRE_MPIRUN();
  const std::string d = cli_testing::scratch("dsa-mpi");
  const Timed r = run_in(d, mpirun(2) + " " + q(kBin) + " replay " + q(kCases + "/edge") + " --backend lowp --comm mpi");
  EXPECT_EQ(r.code, 3) << r.out;  // the edge corpus has cases of cp 1 and 3: they cannot run on 2 ranks
  EXPECT_NE(r.out.find("world size, 2 here"), std::string::npos) << r.out;
}

TEST(MpiSession, UsageIsCheckedBeforeAnyRankStarts) {
  const std::string d = cli_testing::scratch("dsa-mpi");
  fs::copy_file(kCases + "/edge/zigzag_worked_example_cp2.json", d + "/x.json");
  // (cuda --comm mpi is usage only in a build without CUDA or NCCL: MpiCuda.* below.)
  for (const std::string bad : {"fuzz --backend auto --comm mpi --cases 1",
                                "fuzz --backend exec:true --comm mpi --cases 1", "repro x.json --backend exec:true --comm mpi",
                                "shrink x.json --backend lowp --comm mpi"}) {
    const Timed r = run_in(d, q(kBin) + " " + bad);
    EXPECT_EQ(r.code, 2) << bad << "\n" << r.out;
    EXPECT_NE(r.out.find("--comm"), std::string::npos) << bad << "\n" << r.out;
  }
  const Timed r = run_in(d, "DSA_TEST_MPI_FAULT=1:x:exit " + q(kBin) + " fuzz --backend lowp --comm mpi --corpus none --cases 1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("DSA_TEST_MPI_FAULT"), std::string::npos) << r.out;
}

TEST(MpiLayer, CollectivesRanksAndWireUnderMpirun) {
  REQUIRE_MPIRUN();
  const std::string d = cli_testing::scratch("dsa-mpi");
  for (int np : {2, 3, 4}) {
    const Timed r = run_in(d, mpirun(np) + " " + q(DSA_MPI_LAYER_TESTS));
    EXPECT_EQ(r.code, 0) << "np " << np << "\n" << r.out;
  }
}

// ---- --backend cuda --comm mpi (harness/mpi_cuda_part.cpp) ----------------------------------------
// Without a device (CI) the refusals run: every rank says it cannot run (exit 3) and none hangs.
// With devices, what the GPU count allows: one rank gives the in-process run's results, more ranks
// than GPUs are refused on every rank (exit 2), and faults end the run naming the rank; the rest
// skips saying how many GPUs it needs (reports/device/device-run.sh, stage mpicuda, runs them).

int gpus() {
#ifdef DSA_HAVE_CUDA
  return fused::device_count();
#else
  return 0;
#endif
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

#define REQUIRE_CUDA_MPI_BUILD()                                                                  \
  if (!cuda_mpi_built())                                                                         \
  GTEST_SKIP() << "this build has no CUDA or no NCCL: --backend cuda --comm mpi is refused as usage " \
                  "(MpiCuda.UsageWithoutCudaOrNcclInTheBuild)"
#define REQUIRE_GPUS(n)                                                                           \
  if (gpus() < (n))                                                                              \
  GTEST_SKIP() << "needs " << (n) << " CUDA device(s), " << gpus()                               \
               << " here: run on the GPU machine (reports/device/device-run.sh, stage mpicuda)"

TEST(MpiCuda, UsageWithoutCudaOrNcclInTheBuild) {
  if (cuda_mpi_built()) GTEST_SKIP() << "built with CUDA and NCCL: --backend cuda --comm mpi is no usage error here";
  const std::string d = cli_testing::scratch("dsa-mpi");
  const Timed r = run_in(d, q(kBin) + " fuzz --backend cuda --comm mpi --cases 1 --corpus none");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--comm: mpi with backend cuda needs CUDA and NCCL"), std::string::npos) << r.out;
}

TEST(MpiCuda, WithoutADeviceEveryRankCannotRunAndNoneHangs) {
  REQUIRE_CUDA_MPI_BUILD();
  if (gpus() > 0) GTEST_SKIP() << "a CUDA device is present: the device tests below run instead";
  const std::string d = cli_testing::scratch("dsa-mpi");
  // One rank without a launcher (an MPI singleton), then 1, 2 and 3 ranks under mpirun.
  std::vector<std::pair<int, std::string>> runs = {{1, ""}};
  if (!mpirun(1).empty())
    for (int np : {1, 2, 3}) runs.push_back({np, mpirun(np) + " "});
  for (auto& [np, launcher] : runs) {
    SCOPED_TRACE(launcher.empty() ? "singleton" : "np " + std::to_string(np));
    const Timed r = run_in(d, launcher + q(kBin) + " fuzz --backend cuda --comm mpi --profile smoke --cases 2 --corpus none " +
                                  "--rank-timeout 5 --report r.json");
    EXPECT_EQ(r.code, 3) << r.out;
    EXPECT_LT(r.seconds, 30) << r.out;
    EXPECT_EQ(count_of(r.out, "cannot run here: --backend cuda --comm mpi: rank 0 (host "), size_t(np)) << r.out;
    EXPECT_NE(r.out.find("sees no CUDA device; every rank needs a GPU of its own"), std::string::npos) << r.out;
  }
}

TEST(MpiCuda, MoreRanksOnANodeThanGpusIsRefusedOnEveryRank) {
  REQUIRE_CUDA_MPI_BUILD();
  REQUIRE_MPIRUN();
  REQUIRE_GPUS(1);
  const std::string d = cli_testing::scratch("dsa-mpi");
  const int np = gpus() + 1;
  const Timed r = run_in(d, mpirun(np) + " " + q(kBin) + " fuzz --backend cuda --comm mpi --profile smoke --cases 2 " +
                                "--corpus none --rank-timeout 5");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_LT(r.seconds, 60) << r.out;
  EXPECT_EQ(count_of(r.out, "error: -np: NCCL cannot put two ranks on one GPU"), size_t(np)) << r.out;
}

// Every tensor but those of `except`: shapes and bits.
void expect_same_bits_but(const Result& a, const Result& b, const std::vector<std::string>& except,
                          const std::string& what) {
  EXPECT_EQ(a.topk.data, b.topk.data) << what << ": topk";
  a.for_each_float([&](const std::string& name, const TensorD& t) {
    if (std::find(except.begin(), except.end(), name) != except.end()) return;
    b.for_each_float([&](const std::string& n, const TensorD& u) {
      if (n != name) return;
      ASSERT_EQ(t.shape, u.shape) << what << ": " << name;
      EXPECT_EQ(std::memcmp(t.data.data(), u.data.data(), t.data.size() * sizeof(double)), 0) << what << ": " << name;
    });
  });
}

TEST(MpiCuda, RanksGiveTheInProcessResultsOnEveryGpuCount) {
  REQUIRE_CUDA_MPI_BUILD();
  REQUIRE_MPIRUN();
  REQUIRE_GPUS(1);
  const std::string d = cli_testing::scratch("dsa-mpi");
  for (int np = 1; np <= std::min(gpus(), 8); np *= 2) {
    SCOPED_TRACE("np " + std::to_string(np));
    const std::string dump = d + "/np" + std::to_string(np);
    fs::create_directories(dump);
    const Timed r = run_in(d, "DSA_TEST_MPI_DUMP=" + q(dump) + " " + mpirun(np) + " " + q(kBin) +
                                  " fuzz --backend cuda --comm mpi --profile smoke --cases 8 --corpus none --report r.json");
    ASSERT_TRUE(r.code == 0 || r.code == 1) << r.out;
    const json rep = report_at(d + "/r.json");
    EXPECT_EQ(rep["context"]["comm"], "mpi");
    EXPECT_EQ(rep["context"]["world_size"], np);
    EXPECT_EQ(rep["context"]["rank_devices"].size(), size_t(np)) << rep["context"].dump();
    DSA_EXPECT_MATCHES_SCHEMA(rep, "report.schema.json");
    // The same cases in one process, ranks as threads (--comm local): the same bits, but for the
    // sums through fp32 atomics (the backend's deterministic() leaves those out) and, on more than
    // two ranks, the sums over ranks: NCCL's order of additions is not the local communicator's
    // rank order (on two, a + b = b + a).
    BackendOptions local;
    local.comm = "local";
    const auto in_process = make_backend("cuda", local);
    std::vector<std::string> atomics = {"dc", "dk_pe", "dk_I"};
    if (np > 2) atomics.insert(atomics.end(), {"dW_UK", "dW_UV", "loss"});
    int cases = 0;
    for (int64_t seq = 0; fs::exists(dump + "/case-" + std::to_string(seq) + ".json"); ++seq, ++cases) {
      const Case c = load_case(dump + "/case-" + std::to_string(seq) + ".json");
      const Result over_mpi = exec::read_outputs(dump + "/result-" + std::to_string(seq) + ".safetensors", c);
      expect_same_bits_but(over_mpi, in_process->run(c, prepare_case(c)).result, atomics, describe(c));
      // And the verdict: the report's record against run_case in process.
      const CaseVerdict v = run_case(c, *in_process);
      EXPECT_EQ(rep["cases"][seq]["verdict"], name(v.verdict)) << describe(c);
    }
    EXPECT_EQ(cases, 8);
  }
}

struct CudaFault {
  const char* kind;
  int np;               // ranks (and GPUs needed)
  const char* planted;  // DSA_TEST_MPI_FAULT
  int rank;             // the rank the report must name
  const char* how;
  const char* says;
};
void PrintTo(const CudaFault& f, std::ostream* os) { *os << f.kind; }
class CudaRankFault : public ::testing::TestWithParam<CudaFault> {};

TEST_P(CudaRankFault, EndsTheRunWithinItsDeadlineNamingTheRank) {
  const CudaFault& f = GetParam();
  REQUIRE_CUDA_MPI_BUILD();
  REQUIRE_MPIRUN();
  REQUIRE_GPUS(f.np);
  const std::string d = cli_testing::scratch("dsa-mpi");
  const Timed r = run_in(d, "DSA_TEST_MPI_FAULT=" + std::string(f.planted) + " " + mpirun(f.np) + " " + q(kBin) +
                                " fuzz --backend cuda --comm mpi --profile smoke --cases 6 --corpus none --rank-timeout 5" +
                                " --report r.json --junit j.xml");
  EXPECT_NE(r.code, 0) << r.out;  // never a pass
  EXPECT_LT(r.seconds, 5 + 30) << r.out;
  EXPECT_NE(r.out.find(f.says), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(d + "/r.json")) << "rank 0 wrote no report\n" << r.out;
  const json rep = report_at(d + "/r.json");
  const json& failure = rep["summary"]["rank_failure"];
  ASSERT_TRUE(failure.is_object()) << rep["summary"].dump();
  EXPECT_EQ(failure["how"], f.how);
  EXPECT_EQ(failure["rank"], f.rank);
  EXPECT_EQ(rep["summary"]["failed"], 1);
  EXPECT_NE(slurp(d + "/j.xml").find("rank_failure"), std::string::npos);
}

// hang on rank 1 of 2: rank 0 waits inside an NCCL collective (the progress note says so); rank 0's
// deadline names rank 1, the report is written, ncclCommAbort, then MPI_Abort.
INSTANTIATE_TEST_SUITE_P(
    MpiCuda, CudaRankFault,
    ::testing::Values(CudaFault{"rank0_hang_np1", 1, "0:1:hang", 0, "timeout", "timed out after 5 s (--rank-timeout)"},
                      CudaFault{"rank0_error_np1", 1, "0:2:error", 0, "crash", "planted error"},
                      CudaFault{"hang_np2", 2, "1:1:hang", 1, "timeout", "rank 0 inside collective"},
                      CudaFault{"segv_np2", 2, "1:2:segv", 1, "crash", "killed by SIGSEGV"},
                      CudaFault{"seed_np2", 2, "1:1:seed", 1, "disagree", "disagrees with rank 0 on the case"}),
    [](const ::testing::TestParamInfo<CudaFault>& i) { return std::string(i.param.kind); });

}  // namespace
}  // namespace dsa
