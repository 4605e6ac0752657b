// The Done-when of the harness: for every planted bug, `dsa-parity fuzz --backend mutant:NAME
// --profile smoke --seed 1 --shrink` exits 1 within the smoke budget, and the shrunk case is small,
// still fails on the mutant and passes on the real code. One test per mutant.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>

#include <gtest/gtest.h>

#include "tools/shell_testing.hpp"
#include <nlohmann/json.hpp>

#include "harness/case.hpp"
#include "harness/schema_testing.hpp"
#include "core/layout.hpp"
#include "core/mutant.hpp"

namespace dsa {

// Readable test names in ctest (found by ADL).
void PrintTo(const MutantInfo& p, std::ostream* os) { *os << p.name; }

namespace {
namespace mutants_test {  // its own names in a unity build (README "Layout of the source")

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kBin = DSA_PARITY_BIN;

std::string q(const std::string& s) { return cli_testing::shell_quote(s); }
cli_testing::ShellRun sh(const std::string& line) { return cli_testing::run_shell(line + " 2>&1"); }

TEST(Mutants, TheBinaryListsEveryPlantedBug) {
  auto [code, out] = sh(q(kBin) + " mutants --json");
  ASSERT_EQ(code, 0);
  const json list = json::parse(out);
  ASSERT_EQ(list.size(), all_mutants().size());
  EXPECT_GE(list.size(), 14u);
  for (size_t i = 0; i < list.size(); ++i) EXPECT_EQ(list[i]["name"], all_mutants()[i].name);
}

class EveryMutant : public ::testing::TestWithParam<MutantInfo> {};

TEST_P(EveryMutant, SmokeFuzzFindsItAndShrinksItSmall) {
  const std::string name = GetParam().name, backend = "mutant:" + name;
  const fs::path dir = fs::temp_directory_path() / ("dsa-mutant-" + std::to_string(getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string report = (dir / "r.json").string();

  const auto t0 = std::chrono::steady_clock::now();
  auto [code, out] = sh("cd " + q(dir.string()) + " && " + q(kBin) + " fuzz --backend " + backend +
                        " --profile smoke --seed 1 --shrink --report " + q(report));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(code, 1) << out;
  EXPECT_LT(seconds, 60) << "the smoke budget";

  std::ifstream f(report);
  const json rep = json::parse(f);
  int64_t first = -1;
  for (auto& c : rep["cases"])
    if (c["verdict"] == "fail" && first < 0) first = c["index"];
  ASSERT_GE(first, 0);

  // Every failure key was shrunk once; the shrunk cases are small and isolate the bug.
  int64_t shrunk = 0;
  for (auto& c : rep["cases"]) {
    if (!c.contains("shrunk") || c["shrunk"].is_null()) continue;
    ++shrunk;
    const json& s = c["shrunk"];
    EXPECT_LE(s["tp"].get<int64_t>(), 16) << s["description"];
    // Paths in the report are relative to its folder.
    const std::string file = (dir / s["file"].get<std::string>()).string();
    EXPECT_NE(s["file"].get<std::string>()[0], '/');
    const Case sc = load_case(file);
    EXPECT_LE(sc.problem.dims.H, 2) << s["description"];
    EXPECT_LE(sc.problem.seqlens.size(), 2u) << s["description"];
    EXPECT_EQ(sh(q(kBin) + " repro " + q(file) + " --backend " + backend).code, 1) << s["description"];
    EXPECT_EQ(sh(q(kBin) + " repro " + q(file) + " --backend lowp").code, 0) << s["description"];
  }
  EXPECT_GE(shrunk, 1);
  // Mutant shrinks never land in the source corpus: they sit next to the report.
  for (auto& c : rep["cases"])
    if (c.contains("shrunk") && !c["shrunk"].is_null()) {
      EXPECT_EQ(c["shrunk"]["file"].get<std::string>().rfind("r-cases/", 0), 0u);
    }
  std::printf("%-30s detected at case %lld, %.1f s, shrunk to %s\n", name.c_str(), (long long)first, seconds,
              rep["cases"][first]["shrunk"].is_null() ? "-" : rep["cases"][first]["shrunk"]["description"].get<std::string>().c_str());
  fs::remove_all(dir);
  DSA_EXPECT_MATCHES_SCHEMA(rep, "report.schema.json");
}

INSTANTIATE_TEST_SUITE_P(Mutants, EveryMutant, ::testing::ValuesIn(all_mutants()),
                         [](const ::testing::TestParamInfo<MutantInfo>& i) { return std::string(i.param.name); });

}  // namespace mutants_test
}  // namespace
}  // namespace dsa
