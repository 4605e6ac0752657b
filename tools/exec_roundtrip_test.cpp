// The exec:CMD protocol end to end through the built binary: `dsa-parity exec-worker` behind an
// exec backend must reproduce the in-process backend bit for bit; `export` and `mutants` as a user
// runs them.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "tools/shell_testing.hpp"
#include <nlohmann/json.hpp>

#include "harness/backend.hpp"
#include "harness/exec_protocol.hpp"
#include "harness/generate.hpp"
#include "harness/run_case.hpp"
#include "core/mutant.hpp"

namespace dsa {
namespace {
namespace exec_roundtrip_test {  // its own names in a unity build (README "Layout of the source")

namespace fs = std::filesystem;
const std::string kBin = DSA_PARITY_BIN;
const std::string kData = std::string(DSA_SOURCE_DIR) + "/harness/testdata/";

using cli_testing::ShellRun;
std::string quote(const std::string& s) { return cli_testing::shell_quote(s); }
ShellRun sh(const std::string& line) { return cli_testing::run_shell(line + " 2>/dev/null"); }

bool same_bits(const TensorD& a, const TensorD& b) {
  if (a.shape != b.shape || a.data.size() != b.data.size()) return false;
  for (size_t i = 0; i < a.data.size(); ++i)
    if (!(std::bit_cast<uint64_t>(a.data[i]) == std::bit_cast<uint64_t>(b.data[i]) ||
          (std::isnan(a.data[i]) && std::isnan(b.data[i]))))
      return false;
  return true;
}

void expect_same(const Result& a, const Result& b, const std::string& what) {
  EXPECT_EQ(a.topk.data, b.topk.data) << what;
  EXPECT_EQ(a.topk.shape, b.topk.shape) << what;
  ASSERT_EQ(a.scores.has_value(), b.scores.has_value()) << what;
  if (a.scores) { EXPECT_TRUE(same_bits(*a.scores, *b.scores)) << what << " scores"; }
  a.for_each_float([&](const std::string& n, const TensorD& x) {
    b.for_each_float([&](const std::string& m, const TensorD& y) {
      if (m == n) { EXPECT_TRUE(same_bits(x, y)) << what << " " << n; }
    });
  });
}

std::vector<Case> cases() {
  std::vector<Case> cs = {load_case(kData + "valid_full.json")};
  for (int i = 0; i < 6; ++i) cs.push_back(random_case("smoke", 1, i));
  return cs;
}

TEST(ExecRoundTrip, WorkerBehindExecEqualsInProcessBitForBit) {
  for (const char* spec : {"lowp", "reference", "mutant:no_key_grad_reduce_scatter"}) {
    auto direct = make_backend(spec);
    auto ext = make_backend("exec:" + quote(kBin) + " exec-worker --backend " + spec);
    for (const Case& c : cases()) {
      const PreparedCase pc = prepare_case(c);
      expect_same(ext->run(c, pc).result, direct->run(c, pc).result, std::string(spec) + " " + describe(c));
    }
  }
}

TEST(ExecRoundTrip, WorkerRefusesABadFolder) {
  const auto tmp = fs::temp_directory_path() / "dsa-exec-worker-empty";
  fs::create_directories(tmp);
  EXPECT_EQ(sh(quote(kBin) + " exec-worker --backend lowp " + quote(tmp.string())).code, 2);  // no case.json
  fs::remove_all(tmp);
  EXPECT_EQ(sh(quote(kBin) + " exec-worker").code, 2);
}

TEST(Export, WritesInputsAndTheExactOutputs) {
  const auto dir = fs::temp_directory_path() / "dsa-export-test";
  fs::remove_all(dir);
  const auto [code, out] = sh(quote(kBin) + " export " + quote(kData + "valid_full.json") + " --out " + quote(dir.string()));
  ASSERT_EQ(code, 0) << out;
  const Case c = load_case(kData + "valid_full.json");
  const exec::FolderInputs fi = exec::read_inputs(dir.string());
  EXPECT_EQ(to_json(fi.c), to_json(c));
  const Result exact = make_backend("reference")->run(c, prepare_case(c)).result;
  const Result back = exec::read_outputs((dir / "exact.safetensors").string(), c);
  expect_same(back, exact, "export");
  EXPECT_FALSE(back.dc.empty());
  fs::remove_all(dir);
  EXPECT_EQ(sh(quote(kBin) + " export " + quote(kData + "valid_full.json")).code, 2);  // no --out
  EXPECT_EQ(sh(quote(kBin) + " export " + quote(kData + "malformed/topk_zero.json") + " --out /tmp/x").code, 2);
}

// --backend B adds B's outputs, as B returned them: the lowp backend's here, bit for bit; a name
// that is not a backend is bad input before anything is written.
TEST(Export, WritesTheBackendsOutputsBesideTheExactOnes) {
  const auto dir = fs::temp_directory_path() / "dsa-export-backend-test";
  fs::remove_all(dir);
  const auto [code, out] =
      sh(quote(kBin) + " export " + quote(kData + "valid_full.json") + " --out " + quote(dir.string()) + " --backend lowp");
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("backend.safetensors (lowp)"), std::string::npos) << out;
  const Case c = load_case(kData + "valid_full.json");
  const Result lowp = make_backend("lowp")->run(c, prepare_case(c)).result;
  const Result back = exec::read_outputs((dir / "backend.safetensors").string(), c);
  expect_same(back, lowp, "export --backend lowp");
  EXPECT_FALSE(back.dW_UV.empty());
  const Result exact = exec::read_outputs((dir / "exact.safetensors").string(), c);
  EXPECT_NE(exact.O.data, back.O.data);  // two precisions: not the same file twice
  fs::remove_all(dir);
  const auto bad = sh(quote(kBin) + " export " + quote(kData + "valid_full.json") + " --out " + quote(dir.string()) +
                      " --backend nosuch");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_EQ(sh(quote(kBin) + " export " + quote(kData + "valid_full.json") + " --out " + quote(dir.string()) +
               " --comm local").code, 2);  // --comm without --backend
  fs::remove_all(dir);
}

TEST(Mutants, ListsEveryPlantedBug) {
  const auto [code, out] = sh(quote(kBin) + " mutants");
  ASSERT_EQ(code, 0);
  for (auto& p : all_mutants()) {
    EXPECT_NE(out.find(p.name), std::string::npos) << p.name;
    EXPECT_NE(out.find(p.breaks), std::string::npos) << p.name;
  }
  const auto [jcode, jout] = sh(quote(kBin) + " mutants --json");
  ASSERT_EQ(jcode, 0);
  const auto j = nlohmann::json::parse(jout);
  ASSERT_EQ(j.size(), all_mutants().size());
  EXPECT_GE(j.size(), 14u);
  for (auto& e : j) EXPECT_NO_THROW(make_backend(e["backend"].get<std::string>()));
}

}  // namespace exec_roundtrip_test
}  // namespace
}  // namespace dsa
