// fuzz --shard I/N, replay --shard I/N and dsa-parity merge through the built binary, as a CI
// matrix runs them: N shards of one seed merged are the unsharded run (the same cases, verdicts,
// buckets, margins and coverage), --shard 0/1 is no flag, the shards are disjoint, and every input
// that cannot be merged is refused with exit 2 naming the file and the field.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/schema_testing.hpp"
#include "tools/shell_testing.hpp"

namespace dsa {
namespace {
namespace shard_merge_test {  // its own names in a unity build (README "Layout of the source")

namespace fs = std::filesystem;
using cli_testing::Outcome;
using nlohmann::json;

const std::string kBin = DSA_PARITY_BIN;
const std::string kSource = DSA_SOURCE_DIR;

std::string q(const std::string& s) { return cli_testing::shell_quote(s); }

Outcome dsa(const std::string& args, const std::string& dir) { return cli_testing::run_in(dir, q(kBin) + " " + args); }

json read_json(const std::string& path) { return json::parse(cli_testing::slurp(path)); }

void write_json(const std::string& path, const json& j) { std::ofstream(path) << j.dump(1); }

// A planted bug that fails some smoke cases and passes others, so that a merge has failing buckets
// and passing cases (worst_passing) from every shard.
const std::string kMutant = "mutant:dq_missing_scale";

// What a case is and how it was judged, by case number: what must not change between the
// unsharded run and its merged shards. Paths are left out (the reports sit in other folders), but
// the case file's name, which carries the case number, is kept.
std::map<int64_t, json> verdicts(const json& report) {
  std::map<int64_t, json> m;
  for (auto& c : report["cases"]) {
    json v = {{"description", c["description"]}, {"case", c["case"]}, {"verdict", c["verdict"]}};
    for (const char* k : {"bucket", "failure", "margins", "tensors", "name", "origin"})
      if (c.contains(k)) v[k] = c[k];
    if (c.value("case_file", json()).is_string())
      v["case_file"] = fs::path(c["case_file"].get<std::string>()).filename().string();
    m[c["index"].get<int64_t>()] = v;
  }
  return m;
}

// The summary without the repro lines and shrunk files (their paths are relative to each report).
json summary_without_paths(json s) {
  for (auto& b : s["buckets"]) b.erase("repro");
  s.erase("timings");  // seconds: they differ from run to run (summed over shards, they are still seconds)
  return s;
}

std::set<std::string> junit_names(const std::string& xml) {
  std::set<std::string> names;
  static const std::regex testcase(R"re(<testcase classname="[^"]*" name="([^"]*)")re");
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), testcase); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  return names;
}

TEST(ShardMerge, FourShardsMergedAreTheUnshardedRun) {
  const std::string d = cli_testing::scratch("dsa-shard");
  // --cases 10 is the total: shard I runs the random cases i < 10 with i % 4 == I, and the corpus
  // files at positions j % 4 == I. Each report in a folder of its own: merge rebases their paths.
  const std::string run = "fuzz --backend " + kMutant + " --profile smoke --seed 3 --cases 10";
  for (auto* sub : {"u", "s0", "s1", "s2", "s3", "m", "p"}) fs::create_directories(d + "/" + sub);
  const Outcome whole = dsa(run + " --report u/r.json --junit u/j.xml", d);
  ASSERT_EQ(whole.code, 1) << whole.out << whole.err;
  for (int i = 0; i < 4; ++i) {
    const std::string s = "s" + std::to_string(i);
    const Outcome shard = dsa(run + " --shard " + std::to_string(i) + "/4 --report " + s + "/r.json", d);
    ASSERT_TRUE(shard.code == 0 || shard.code == 1) << shard.out << shard.err;
    EXPECT_NE(shard.out.find("random cases: profile smoke, seed 3, paths absorbed+explicit, shard " +
                             std::to_string(i) + "/4: case numbers i < 10 with i % 4 == " + std::to_string(i)),
              std::string::npos)
        << shard.out;
  }
  const json u = read_json(d + "/u/r.json");
  // The shards are disjoint and cover the run: every case number in exactly one of them, random
  // case i in shard i % 4 under its own number (the case file of a failure is named after it).
  std::map<int64_t, int> owner;
  const int64_t corpus = u["summary"]["cases"].get<int64_t>() - 10;
  for (int i = 0; i < 4; ++i) {
    const json s = read_json(d + "/s" + std::to_string(i) + "/r.json");
    EXPECT_EQ(s["context"]["shard"], (json{{"index", i}, {"count", 4}}));
    for (auto& c : s["cases"]) {
      const int64_t index = c["index"].get<int64_t>();
      EXPECT_TRUE(owner.emplace(index, i).second) << "case " << index << " in two shards";
      const std::string origin = c["origin"];
      if (origin.rfind("random ", 0) == 0) {
        const int64_t n = std::stoll(origin.substr(origin.find('#') + 1));
        EXPECT_EQ(n % 4, i) << origin;
        EXPECT_EQ(index, corpus + n) << origin;
      }
      if (c.value("case_file", json()).is_string() && origin.rfind("random ", 0) == 0) {
        EXPECT_NE(c["case_file"].get<std::string>().find("-shard" + std::to_string(i) + "of4/case-" +
                                                         std::to_string(index) + ".json"),
                  std::string::npos)
            << c["case_file"];
      }
    }
    DSA_EXPECT_MATCHES_SCHEMA(s, "report.schema.json");
  }
  EXPECT_EQ(static_cast<int64_t>(owner.size()), u["summary"]["cases"].get<int64_t>());

  // Merged (in any order), the shards are the unsharded run.
  const Outcome merge = dsa("merge s2/r.json s0/r.json s3/r.json s1/r.json -o m/r.json --junit m/j.xml --html m/r.html", d);
  ASSERT_EQ(merge.code, 1) << merge.out << merge.err;  // the run's exit code: a case failed
  EXPECT_NE(merge.out.find("merged 4 shards of 4: the whole run"), std::string::npos) << merge.out;
  const json m = read_json(d + "/m/r.json");
  EXPECT_EQ(verdicts(m), verdicts(u));
  EXPECT_EQ(summary_without_paths(m["summary"]), summary_without_paths(u["summary"]));
  ASSERT_FALSE(m["summary"]["buckets"].empty());
  ASSERT_FALSE(m["worst_passing"].empty());
  std::vector<int64_t> wm, wu;
  for (auto& w : m["worst_passing"]) wm.push_back(w["index"]);
  for (auto& w : u["worst_passing"]) wu.push_back(w["index"]);
  EXPECT_EQ(wm, wu);
  for (const char* k : {"command", "backend", "profile", "master_seed", "paths", "not_selected", "git_sha"})
    EXPECT_EQ(m["context"][k], u["context"][k]) << k;
  EXPECT_FALSE(m["context"].contains("shard"));
  EXPECT_EQ(m["context"]["merged"]["shards"], json::array({0, 1, 2, 3}));
  EXPECT_EQ(m["context"]["merged"]["complete"], true);
  EXPECT_EQ(m["context"]["merged"]["reports"][1]["file"], "../s1/r.json");
  EXPECT_EQ(m["summary"]["exit_code"], 1);
  EXPECT_EQ(junit_names(cli_testing::slurp(d + "/m/j.xml")), junit_names(cli_testing::slurp(d + "/u/j.xml")));
  EXPECT_NE(cli_testing::slurp(d + "/m/r.html").find("merged from 4 of 4 shards"), std::string::npos);
  // The merged report's repro lines run from its folder: their case files were rebased, those a
  // shard wrote for its failures (in its own folder) and the corpus files alike.
  std::vector<std::string> repros = {m["summary"]["buckets"][0]["repro"]};
  for (auto& c : m["cases"])
    if (c["verdict"] == "fail" && c["origin"].get<std::string>().rfind("random ", 0) == 0) {
      repros.push_back(c["repro"]);
      break;
    }
  ASSERT_EQ(repros.size(), 2u);
  EXPECT_EQ(repros[1].rfind("dsa-parity repro ../s", 0), 0u) << repros[1];
  for (const std::string& repro : repros) {
    const Outcome again = cli_testing::run_in(d + "/m", q(kBin) + repro.substr(std::string("dsa-parity").size()));
    EXPECT_EQ(again.code, 1) << repro << "\n" << again.out << again.err;
  }

  // Three of the four: merged, said so on stdout and in the context; the exit code is the run's.
  const Outcome partial = dsa("merge s0/r.json s1/r.json s3/r.json -o p/r.json", d);
  EXPECT_EQ(partial.code, 1) << partial.out << partial.err;
  EXPECT_NE(partial.out.find("merged 3 of 4 shards; missing shard 2: the report covers part of the run"),
            std::string::npos)
      << partial.out;
  const json p = read_json(d + "/p/r.json");
  EXPECT_EQ(p["context"]["merged"]["missing"], json::array({2}));
  EXPECT_EQ(p["context"]["merged"]["complete"], false);
  EXPECT_EQ(p["summary"]["cases"].get<int64_t>(),
            u["summary"]["cases"].get<int64_t>() - read_json(d + "/s2/r.json")["summary"]["cases"].get<int64_t>());
  DSA_EXPECT_MATCHES_SCHEMA(m, "report.schema.json");
}

// The report with what changes from run to run taken out: timings, start, the command line.
json without_timings(json r) {
  for (const char* k : {"arguments", "started", "seconds"}) r["context"].erase(k);
  for (auto* list : {&r["cases"], &r["worst_passing"]})
    for (auto& c : *list) c.erase("timings");
  r["summary"].erase("timings");
  return r;
}

TEST(ShardMerge, ShardZeroOfOneIsTheRunWithoutTheFlag) {
  const std::string d = cli_testing::scratch("dsa-shard");
  const std::string run = "fuzz --backend lowp --profile smoke --seed 4 --cases 6 --corpus " + q(kSource + "/cases/edge");
  const Outcome plain = dsa(run + " --report a.json", d), sharded = dsa(run + " --shard 0/1 --report b.json", d);
  ASSERT_EQ(plain.code, 0) << plain.out << plain.err;
  ASSERT_EQ(sharded.code, 0) << sharded.out << sharded.err;
  EXPECT_EQ(without_timings(read_json(d + "/b.json")), without_timings(read_json(d + "/a.json")));
  EXPECT_EQ(sharded.out.find("shard"), std::string::npos) << sharded.out;
  // And replay: --shard 0/1 runs every file.
  const std::string replay = "replay " + q(kSource + "/cases/edge") + " --backend reference";
  ASSERT_EQ(dsa(replay + " --report c.json", d).code, 0);
  ASSERT_EQ(dsa(replay + " --shard 0/1 --report e.json", d).code, 0);
  EXPECT_EQ(without_timings(read_json(d + "/e.json")), without_timings(read_json(d + "/c.json")));
}

// A corpus origin in the "corpus <path>" form (written where the path from the report's folder would
// climb to the filesystem root) names the file from the corpus, not from the report: merging shards
// from other folders must leave it as it is, as it rebases every relative path.
TEST(ShardMerge, CorpusRelativeOriginsAreNotRebased) {
  const std::string d = cli_testing::scratch("dsa-shard");
  const std::string replay = "replay " + q(kSource + "/cases/edge") + " --backend reference";
  for (int i = 0; i < 2; ++i) {
    const std::string r = "s" + std::to_string(i) + "/r.json";
    ASSERT_EQ(dsa(replay + " --shard " + std::to_string(i) + "/2 --report " + r, d).code, 0);
    json j = read_json(d + "/" + r);
    for (auto& c : j["cases"]) c["origin"] = "corpus " + c["name"].get<std::string>();
    write_json(d + "/" + r, j);
  }
  const Outcome merge = dsa("merge s0/r.json s1/r.json -o m/r.json", d);
  ASSERT_EQ(merge.code, 0) << merge.out << merge.err;
  const json m = read_json(d + "/m/r.json");
  ASSERT_GT(m["cases"].size(), 2u);
  for (auto& c : m["cases"]) EXPECT_EQ(c["origin"], "corpus " + c["name"].get<std::string>());
}

TEST(ShardMerge, ReplayShardsMergedAreTheWholeReplay) {
  const std::string d = cli_testing::scratch("dsa-shard");
  const std::string replay = "replay " + q(kSource + "/cases/edge") + " --backend reference";
  ASSERT_EQ(dsa(replay + " --report all.json", d).code, 0);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(dsa(replay + " --shard " + std::to_string(i) + "/3 --report r" + std::to_string(i) + ".json", d).code, 0);
  const Outcome merge = dsa("merge r0.json r1.json r2.json -o m.json", d);
  ASSERT_EQ(merge.code, 0) << merge.out << merge.err;
  const json all = read_json(d + "/all.json"), m = read_json(d + "/m.json");
  EXPECT_EQ(verdicts(m), verdicts(all));
  EXPECT_EQ(summary_without_paths(m["summary"]), summary_without_paths(all["summary"]));
  // The case file at position j is in shard j % 3.
  const json r1 = read_json(d + "/r1.json");
  ASSERT_FALSE(r1["cases"].empty());
  for (auto& c : r1["cases"]) EXPECT_EQ(c["index"].get<int64_t>() % 3, 1) << c["origin"];
}

TEST(ShardMerge, TimeBudgetShardsRunTheirOwnCaseNumbers) {
  const std::string d = cli_testing::scratch("dsa-shard");
  const Outcome r = dsa("fuzz --backend lowp --profile smoke --corpus none --time-budget 1 --shard 2/3 --report r.json", d);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("shard 2/3: case numbers i % 3 == 2 until the time budget"), std::string::npos) << r.out;
  const json rep = read_json(d + "/r.json");
  ASSERT_GE(rep["cases"].size(), 1u);
  int64_t expected = 2;
  for (auto& c : rep["cases"]) {  // 2, 5, 8, ...: numbered as in the unsharded run
    EXPECT_EQ(c["index"], expected);
    EXPECT_EQ(c["origin"], "random smoke seed 1 #" + std::to_string(expected));
    expected += 3;
  }
}

TEST(ShardMerge, BadShardValuesAreExitTwoNamingShardAndTheRule) {
  const std::string d = cli_testing::scratch("dsa-shard");
  for (const std::string& cmd : {std::string("fuzz --backend lowp --corpus none --cases 1"),
                                 "replay " + q(kSource + "/cases/edge") + " --backend lowp"})
    for (const char* bad : {"3/2", "0/0", "a/b", "-1/4", "1/4/5", "4/4", "1/"}) {
      const Outcome r = dsa(cmd + " --shard=" + bad, d);
      EXPECT_EQ(r.code, 2) << cmd << " --shard=" << bad << "\n" << r.out << r.err;
      EXPECT_NE(r.err.find("--shard: must be I/N, integers with 0 \u2264 I < N"), std::string::npos) << bad << ": " << r.err;
      EXPECT_NE(r.err.find(std::string("got '") + bad + "'"), std::string::npos) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_TRUE(r.out.empty()) << r.out;  // refused before any case
    }
}

TEST(ShardMerge, ReportsThatAreNotShardsOfOneRunAreRefusedNamingTheFileAndTheField) {
  const std::string d = cli_testing::scratch("dsa-shard");
  const std::string run = "fuzz --backend lowp --profile smoke --corpus none --cases 2 --seed 1";
  ASSERT_EQ(dsa(run + " --shard 0/2 --report r0.json", d).code, 0);
  ASSERT_EQ(dsa(run + " --shard 1/2 --report r1.json", d).code, 0);
  ASSERT_EQ(dsa("fuzz --backend lowp --profile smoke --corpus none --cases 2 --seed 2 --shard 1/2 --report seed.json", d).code, 0);
  ASSERT_EQ(cli_testing::run_in(d, "DSA_GIT_SHA=0123abc " + q(kBin) + " " + run + " --shard 1/2 --report sha.json").code, 0);
  ASSERT_EQ(dsa("merge r0.json r1.json -o merged.json", d).code, 0);
  const json r1 = read_json(d + "/r1.json");
  auto edited = [&](const std::string& name, const std::function<void(json&)>& edit) {
    json j = r1;
    edit(j);
    write_json(d + "/" + name, j);
    return name;
  };
  const std::string profile = edited("profile.json", [](json& j) { j["context"]["profile"] = "default"; });
  const std::string backend = edited("backend.json", [](json& j) { j["context"]["backend"] = "reference"; });
  const std::string oracle = edited("oracle.json", [](json& j) { j["context"]["oracle"] = "gpu"; });
  const std::string count = edited("count.json", [](json& j) { j["context"]["shard"]["count"] = 3; });
  const std::string v2 = edited("v2.json", [](json& j) { j["schema"] = "dsa-parity/report/v2"; });
  fs::copy_file(d + "/r0.json", d + "/r0-again.json");
  std::ofstream(d + "/truncated.json") << cli_testing::slurp(d + "/r1.json").substr(0, 200);
  fs::copy_file(kSource + "/cases/edge/shorter_than_k.json", d + "/case.json");
  const std::pair<std::string, std::string> refused[] = {
      {"seed.json", "seed.json: context.master_seed: is \"2\" but r0.json has \"1\""},
      {"sha.json", "sha.json: context.git_sha: is \"0123abc\""},
      {profile, "profile.json: context.profile: is \"default\" but r0.json has \"smoke\""},
      {backend, "backend.json: context.backend: "},
      {oracle, "oracle.json: context.oracle: "},
      {count, "count.json: context.shard: is shard 1/3 but r0.json is shard 0/2"},
      {"r0-again.json", "r0-again.json: context.shard: shard 0/2 is also r0.json: each shard is merged once"},
      {v2, "v2.json: schema: is 'dsa-parity/report/v2': this dsa-parity reads dsa-parity/report/v1 reports only"},
      {"truncated.json", "truncated.json: is not valid JSON"},
      {"case.json", "case.json: is not a dsa-parity report"},
      {"missing.json", "missing.json: does not exist"},
      {"merged.json", "merged.json: context.merged: is a merged report already"},
  };
  for (auto& [file, message] : refused) {
    const Outcome r = dsa("merge r0.json " + file + " -o out.json", d);
    EXPECT_EQ(r.code, 2) << file << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("dsa-parity merge: error: " + message), std::string::npos) << file << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(d + "/out.json")) << file;  // nothing written
  }
  for (const auto& [args, field] : std::vector<std::pair<std::string, std::string>>{
           {"merge r0.json r1.json", "--out: is required"},
           {"merge -o out.json", "REPORT.json: give the reports of the shards to merge"},
           {"merge r0.json r1.json -o r1.json", "--out: is r1.json, one of the reports to merge"},
           {"merge r0.json r1.json -o out.json --keep-worst -1", "--keep-worst"},
           {"merge r0.json r1.json -o out.json --bogus", "--bogus"}}) {
    const Outcome r = dsa(args, d);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(field), std::string::npos) << args << ": " << r.err;
  }
}

}  // namespace shard_merge_test
}  // namespace
}  // namespace dsa
