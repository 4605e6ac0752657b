#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "harness/case.hpp"
#include "harness/schema_testing.hpp"
#include "harness/generate.hpp"
#include "core/errors.hpp"

namespace dsa {
namespace {
namespace case_test {  // its own names in a unity build (README "Layout of the source")

const std::string kData = std::string(DSA_SOURCE_DIR) + "/harness/testdata/";
const std::string kMalformed = std::string(DSA_SOURCE_DIR) + "/cases/malformed/";

struct ManifestRow {
  std::string file, field;
  int code = -1;
};

// cases/malformed/expected.tsv: file, exit code, the field named on stderr.
std::vector<ManifestRow> malformed_manifest() {
  std::vector<ManifestRow> rows;
  std::ifstream in(kMalformed + "expected.tsv");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    ManifestRow r;
    std::getline(f, r.file, '\t');
    f >> r.code;
    f.ignore(1);
    std::getline(f, r.field);
    rows.push_back(r);
  }
  return rows;
}

TEST(Case, EveryMalformedFileIsRefusedNamingItsField) {
  const auto rows = malformed_manifest();
  int n = 0;
  for (const ManifestRow& r : rows) {
    ++n;
    SCOPED_TRACE(r.file);
    try {
      load_case(kMalformed + r.file);
      EXPECT_EQ(r.code, 0) << r.file << " was accepted";
    } catch (const InvalidInput& e) {
      EXPECT_EQ(r.code, 2) << e.what();
      EXPECT_EQ(e.field.rfind(r.field, 0), 0u) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind(e.field + ": ", 0), 0u) << e.what();
      EXPECT_FALSE(e.rule.empty());
    }
  }
  EXPECT_GE(n, 100);
  // Every malformed file is listed, so none is silently skipped.
  int files = 0;
  for (auto& f : std::filesystem::directory_iterator(kMalformed)) files += f.path().extension() == ".json";
  EXPECT_EQ(files, n);
}

TEST(Case, SyntaxErrorNamesTheByte) {
  try {
    case_from_json(nlohmann::json::parse("{}"));  // a valid JSON value but no schema
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_EQ(e.field, "schema");
  }
  try {
    load_case(kMalformed + "not_json.json");
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON at byte 44"), std::string::npos) << e.what();
  }
}

TEST(Case, FullCaseParsesEveryField) {
  Case c = load_case(kData + "valid_full.json");
  const Problem& p = c.problem;
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(p.seqlens, (std::vector<int64_t>{5, 11}));
  EXPECT_EQ(p.cp.size, 2);
  EXPECT_EQ(p.cp.layout, Layout::zigzag);
  EXPECT_EQ(p.cp.pad_multiple, 4);
  EXPECT_EQ(p.dims.H, 2);
  EXPECT_EQ(p.dims.C, 16);
  EXPECT_EQ(p.dims.DI, 8);
  EXPECT_EQ(p.topk, 4);
  EXPECT_DOUBLE_EQ(p.softmax_scale, 0.2886751345948129);
  EXPECT_EQ(p.loss, LossMode::sparse);
  EXPECT_DOUBLE_EQ(p.coeff, 0.5);
  EXPECT_EQ(p.pad_rows, PadRows::masked);
  EXPECT_TRUE(c.init.score_ties && c.init.zero_rows && c.init.huge_future_k_I && c.init.poison_pad_keys &&
              c.init.inject_indices);
  EXPECT_FALSE(c.init.large_logits);
  EXPECT_EQ(c.stages, all_stages());
  EXPECT_FALSE(c.note.empty());
}

TEST(Case, OmittedFieldsTakeDefaults) {
  Case c = load_case(kData + "valid_minimal.json");
  const Problem d;
  EXPECT_EQ(c.problem.cp.size, 1);
  EXPECT_EQ(c.problem.dims.C, d.dims.C);
  EXPECT_EQ(c.problem.topk, d.topk);
  EXPECT_EQ(c.problem.loss, d.loss);
  EXPECT_EQ(c.init.distribution, "normal");
  EXPECT_FALSE(c.init.inject_indices);
  EXPECT_EQ(c.stages, all_stages());
}

TEST(Case, JsonRoundTripIsExact) {
  Case c = load_case(kData + "valid_full.json");
  c.problem.softmax_scale = 1.0 / std::sqrt(7.0);  // needs all 17 digits
  c.seed = 0xFFFFFFFFFFFFFFFFull;
  c.stages = {Stage::attention, Stage::loss};
  const auto path = std::filesystem::temp_directory_path() / "dsa_case_roundtrip.json";
  save_case(c, path.string());
  Case back = load_case(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(to_json(back), to_json(c));
  EXPECT_EQ(back.problem.softmax_scale, c.problem.softmax_scale);
  EXPECT_EQ(back.seed, c.seed);
  EXPECT_TRUE(back.checks(Stage::loss));
  EXPECT_FALSE(back.checks(Stage::indexer));
}

TEST(Case, DescribeIsOneLineWithTheFeatures) {
  Case c = load_case(kData + "valid_full.json");
  const std::string d = describe(c);
  EXPECT_EQ(d.find('\n'), std::string::npos);
  for (const char* part : {"seqlens=5,11", "cp=2/zigzag/pad4", "H=2", "C=16", "K=4", "loss=sparse*0.5",
                           "pad=masked", "ties", "zero-rows", "poison-pads", "inject"})
    EXPECT_NE(d.find(part), std::string::npos) << part << " missing in " << d;
  EXPECT_EQ(d.find("large-logits"), std::string::npos);
}

TEST(Case, LayoutRulesComeFromTheReference) {
  auto j = to_json(load_case(kData + "valid_minimal.json"));
  j["cp"] = {{"size", 3}, {"layout", "contiguous"}, {"pad_multiple", 5}};
  EXPECT_NO_THROW(case_from_json(j));  // contiguous takes any cp and pad multiple
  j["cp"]["layout"] = "zigzag";
  try {
    case_from_json(j);
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_EQ(e.field, "cp.pad_multiple");
  }
  j["cp"]["pad_multiple"] = 12;
  EXPECT_NO_THROW(case_from_json(j));
}

// The schema and the parser are held to the same cases.
struct CaseSchema {
  nlohmann::json root = load_schema("case.schema.json");
  std::string check(const nlohmann::json& v) const { return schema_violation(v, root, "case"); }
};

TEST(CaseSchema, AcceptsEveryCaseTheParserWritesAndRefusesMalformedOnes) {
  if (!schema_checks_available()) GTEST_SKIP() << "built without valijson (libvalijson-dev)";
  const CaseSchema schema;
  EXPECT_EQ(schema.root["properties"]["schema"]["const"], kCaseSchema);
  for (const char* f : {"valid_full.json", "valid_minimal.json"}) {
    std::ifstream in(kData + f);
    EXPECT_EQ(schema.check(nlohmann::json::parse(in)), "") << f;
  }
  for (const auto& p : profiles())
    for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(schema.check(to_json(random_case(p, 11, i))), "") << p << " " << i;
  // Malformed files that are valid JSON are refused by the schema too, except the rules that span
  // fields or need arithmetic, and the unsigned 64-bit seed (the validator's alone).
  const std::set<std::string> validator_only = {"dims_huge.json", "pad_multiple_zigzag.json", "seqlens_all_zero.json",
                                                "seed_negative.json"};
  // Those only the parser can see (duplicate keys, depth, numbers out of range) or that need the
  // arithmetic of bounds.hpp (size bombs), and the legal edge cases of the corpus.
  auto parser_only = [](const std::string& name) {
    for (const char* p : {"bomb_", "duplicate_", "deep_", "1e400", "seed_2p64", "seqlen_uint64", "seqlen_too_long"})
      if (name.find(p) != std::string::npos) return true;
    return false;
  };
  std::set<std::string> legal;
  for (const auto& r : malformed_manifest())
    if (r.code == 0) legal.insert(r.file);
  for (auto& e : std::filesystem::directory_iterator(kMalformed)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".json" || validator_only.count(name) || parser_only(name) || legal.count(name))
      continue;
    nlohmann::json j;
    try {
      std::ifstream raw(e.path());
      j = nlohmann::json::parse(raw);
    } catch (const nlohmann::json::exception&) {
      continue;  // not JSON at all: nothing for a schema to check
    }
    EXPECT_NE(schema.check(j), "") << name;
  }
}

}  // namespace case_test
}  // namespace
}  // namespace dsa
