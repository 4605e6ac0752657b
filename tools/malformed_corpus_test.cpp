// The malformed-input corpus (cases/malformed/, manifest expected.tsv) and file-system oddities
// made at run time (git cannot hold a FIFO), through the built binary: each is refused with the
// manifest's exit code and, for exit 2, exactly one stderr line naming the field, within 5 s.
// Also the size limits and flag rules of every subcommand that takes a case or builds a layout.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tools/shell_testing.hpp"

namespace dsa {
namespace {
namespace malformed_corpus_test {  // its own names in a unity build (README "Layout of the source")

namespace fs = std::filesystem;

const std::string kBin = DSA_PARITY_BIN;
const std::string kSource = DSA_SOURCE_DIR;
const std::string kDir = kSource + "/cases/malformed/";

std::string q(const std::string& s) { return cli_testing::shell_quote(s); }

struct Outcome {
  int code = -1;
  std::string err;
  double seconds = 0;
};

std::string scratch() { return cli_testing::scratch("dsa-malformed"); }

// `dsa-parity ARGS` with a hard 20 s kill (a hang fails the deadline check, not the whole suite).
Outcome dsa(const std::string& args, const std::string& dir) {
  const std::string err = dir + "/stderr.txt";
  const auto t0 = std::chrono::steady_clock::now();
  const auto run = cli_testing::run_shell("cd " + q(dir) + " && timeout -s KILL 20 " + q(kBin) + " " + args +
                                          " >/dev/null 2>" + q(err));
  Outcome r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = run.code;
  std::ifstream f(err);
  std::stringstream s;
  s << f.rdbuf();
  r.err = s.str();
  return r;
}

struct Expected {
  std::string file, field;
  int code = -1;
};

std::vector<Expected> manifest() {
  std::vector<Expected> v;
  std::ifstream in(kDir + "expected.tsv");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    Expected e;
    std::getline(f, e.file, '\t');
    f >> e.code;
    f.ignore(1);
    std::getline(f, e.field);
    v.push_back(e);
  }
  return v;
}

void expect_refused(const Outcome& r, int code, const std::string& field, const std::string& what) {
  EXPECT_EQ(r.code, code) << what << "\n" << r.err;
  EXPECT_LT(r.seconds, 5.0) << what;
  if (code == 2) {
    EXPECT_NE(r.err.find(field), std::string::npos) << what << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << what << ": " << r.err;
  }
}

TEST(MalformedCorpus, EveryFileHasItsManifestOutcome) {
  const std::string d = scratch();
  const auto m = manifest();
  ASSERT_GE(m.size(), 100u);
  size_t files = 0;
  for (auto& e : fs::directory_iterator(kDir)) files += e.path().extension() == ".json";
  EXPECT_EQ(files, m.size()) << "every file of cases/malformed/ is in expected.tsv, and only those";
  int refused = 0;
  for (const Expected& e : m) {
    ASSERT_TRUE(fs::exists(kDir + e.file)) << e.file;
    const Outcome r = dsa("repro " + q(kDir + e.file) + " --backend lowp", d);
    expect_refused(r, e.code, e.field, e.file);
    refused += e.code == 2 && r.code == 2;
  }
  EXPECT_GE(refused, 100);
}

// The same files through the other subcommands that read a case.
TEST(MalformedCorpus, ShrinkExportAndReplayRefuseThemToo) {
  const std::string d = scratch();
  for (const char* f : {"deep_schema_arrays.json", "duplicate_key_seed.json", "scale_1e400.json", "bomb_seqlen_5e8.json",
                        "invalid_utf8_string.json"}) {
    const Expected e = [&] {
      for (auto& x : manifest())
        if (x.file == f) return x;
      return Expected{};
    }();
    ASSERT_EQ(e.code, 2) << f;
    expect_refused(dsa("shrink " + q(kDir + f) + " --backend lowp --out o.json", d), 2, e.field, std::string("shrink ") + f);
    expect_refused(dsa("export " + q(kDir + f) + " --out exp", d), 2, e.field, std::string("export ") + f);
  }
  // replay of the whole corpus folder skips malformed/ (its cases are never run as a corpus).
  const Outcome r = dsa("replay " + q(kSource + "/cases") + " --backend reference", d);
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(MalformedCorpus, FileSystemOdditiesAreRefusedWithoutBlocking) {
  const std::string d = scratch();
  const std::string good = R"({"schema": "dsa-parity/case/v1", "seed": 1, "softmax_scale": 0.25, "seqlens": [3]})";
  std::ofstream(d + "/good.json") << good;
  fs::create_directories(d + "/elsewhere");
  std::ofstream(d + "/elsewhere/outside.json") << good;
  fs::create_directories(d + "/cases");
  ASSERT_EQ(mkfifo((d + "/cases/fifo.json").c_str(), 0644), 0);
  fs::create_symlink("/dev/zero", d + "/cases/dev_zero.json");
  fs::create_symlink("/dev/null", d + "/cases/dev_null.json");
  fs::create_directories(d + "/cases/directory.json");
  fs::create_symlink(d + "/elsewhere/outside.json", d + "/cases/outside_link.json");
  fs::create_symlink(d + "/cases/missing.json", d + "/cases/dangling.json");
  std::ofstream(d + "/cases/inside.json") << good;
  fs::create_symlink("inside.json", d + "/cases/inside_link.json");
  {
    std::ofstream big(d + "/cases/huge.json");
    big << R"({"schema": "dsa-parity/case/v1", "seed": 1, "softmax_scale": 0.25, "seqlens": [3], "note": ")"
        << std::string(2 << 20, 'a') << "\"}";
  }
  const std::pair<const char*, const char*> refused[] = {
      {"fifo.json", "a FIFO"},          {"dev_zero.json", "outside its folder"}, {"dev_null.json", "outside its folder"},
      {"directory.json", "a directory"}, {"outside_link.json", "outside its folder"}, {"dangling.json", "case"},
      {"huge.json", "bytes, more than"},
  };
  for (auto& [file, why] : refused) {
    const Outcome r = dsa("repro " + q(d + "/cases/" + file) + " --backend lowp", d);
    expect_refused(r, 2, "case", file);
    EXPECT_NE(r.err.find(why), std::string::npos) << file << ": " << r.err;
  }
  // A symlink within its own folder is an ordinary case file.
  EXPECT_EQ(dsa("repro " + q(d + "/cases/inside_link.json") + " --backend lowp", d).code, 0);
  // Unreadable: refused, unless this runs as root (root reads a mode-000 file).
  std::ofstream(d + "/cases/unreadable.json") << good;
  fs::permissions(d + "/cases/unreadable.json", fs::perms::none);
  const Outcome r = dsa("repro " + q(d + "/cases/unreadable.json") + " --backend lowp", d);
  if (geteuid() == 0)
    EXPECT_EQ(r.code, 0) << r.err;
  else
    expect_refused(r, 2, "cannot be opened", "unreadable.json");
}

TEST(Limits, LayoutAndCasesAreBoundedBeforeAllocation) {
  const std::string d = scratch();
  // Zigzag: 2^31 rows and more are a hard limit; contiguous: the bytes of the layout's tables.
  expect_refused(dsa("layout --seqlens 5,11 --cp 1000000000", d), 2, "cp.size", "layout --cp 1e9");
  expect_refused(dsa("layout --seqlens 5,11 --cp 1000000000 --layout contiguous", d), 2, "--max-bytes",
                 "layout --cp 1e9 contiguous");
  expect_refused(dsa("layout --seqlens 100000 --max-pairs 1000", d), 2, "--max-pairs", "layout --max-pairs");
  expect_refused(dsa("layout --seqlens 64 --max-bytes 1K", d), 2, "--max-bytes", "layout --max-bytes 1K");
  expect_refused(dsa("layout --seqlens 64 --max-bytes lots", d), 2, "--max-bytes", "layout --max-bytes lots");
  EXPECT_EQ(dsa("layout --seqlens 5,11 --cp 2", d).code, 0);
  // A case within raised limits runs; the same case under the default pair limit does not.
  std::ofstream(d + "/wide.json") << R"({"schema": "dsa-parity/case/v1", "seed": 1, "softmax_scale": 0.25,
      "seqlens": [4000], "dims": {"H": 1, "Dn": 1, "R": 1, "C": 1, "Dv": 1, "HI": 1, "DI": 1}})";
  expect_refused(dsa("repro wide.json --backend lowp --max-pairs 1000000", d), 2, "seqlens", "repro --max-pairs");
  expect_refused(dsa("repro wide.json --backend lowp --max-bytes 100K", d), 2, "--max-bytes", "repro --max-bytes");
  expect_refused(dsa("shrink wide.json --backend lowp --max-pairs 10", d), 2, "--max-pairs", "shrink --max-pairs");
  expect_refused(dsa("export wide.json --out e --max-pairs 10", d), 2, "--max-pairs", "export --max-pairs");
  expect_refused(dsa("replay wide.json --backend lowp --max-pairs 10", d), 2, "--max-pairs", "replay --max-pairs");
  expect_refused(dsa("fuzz --corpus wide.json --cases 1 --backend lowp --max-pairs 10", d), 2, "--max-pairs",
                 "fuzz --max-pairs");
}

TEST(Limits, FlagRules) {
  const std::string d = scratch();
  expect_refused(dsa("fuzz --backend lowp --cases 0 --corpus none", d), 2, "--cases: must be \u2265 1", "--cases 0");
  // mpi is for the reference backends (and only in a build with Open MPI: refused by name without).
  expect_refused(dsa("fuzz --backend exec:true --comm mpi --cases 1 --corpus none", d), 2, "--comm", "--comm mpi");
  expect_refused(dsa("fuzz --backend lowp --comm nccl --cases 1 --corpus none", d), 2, "--comm", "--comm nccl lowp");
  expect_refused(dsa("shrink x.json --backend lowp --comm mpi", d), 2, "", "shrink --comm mpi");
  expect_refused(dsa("fuzz --backend lowp --seed 18446744073709551616 --cases 1", d), 2, "--seed", "--seed 2^64");
  const Outcome r = dsa("fuzz --backend lowp --profile smoke --seed 18446744073709551615 --cases 1 --corpus none", d);
  EXPECT_EQ(r.code, 0) << r.err;
}

}  // namespace malformed_corpus_test
}  // namespace
}  // namespace dsa
