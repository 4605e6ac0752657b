#include "harness/report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <gtest/gtest.h>

#include "harness/bucket.hpp"
#include "harness/fuzz.hpp"
#include "harness/report_read.hpp"
#include "harness/schema_testing.hpp"
#include "core/errors.hpp"
#include "core/test_dirs.hpp"

namespace dsa {
namespace {
namespace report_test {  // its own names in a unity build (README "Layout of the source")

using nlohmann::json;

Case small_case() {
  Case c;
  c.seed = 3;
  c.problem.seqlens = {5, 11};
  c.problem.cp.size = 2;
  c.init.score_ties = true;
  return c;
}

std::vector<CaseRecord> sample_records() {
  std::vector<CaseRecord> rs(4);
  const StreamLayout L = make_layout({5, 11}, CpSpec{2, Layout::zigzag, 0});
  TensorD exact({20, 2}, 1.0), fused = exact;
  fused.at(17, 1) = 2.0;
  exact.at(5, 0) = -std::numeric_limits<double>::infinity();
  fused.at(5, 0) = exact.at(5, 0);

  rs[0].index = 0;
  rs[0].origin = "random";
  rs[0].c = small_case();
  rs[0].v.checks.push_back(compare_tensor("lse", exact, exact, exact, L));
  rs[0].v.checks.push_back(compare_tensor("dq_I", TensorD{}, exact, exact, L));  // not checked

  rs[1] = rs[0];
  rs[1].index = 1;
  rs[1].v.checks = {compare_tensor("lse", fused, exact, exact, L)};  // e_l = 0: ratio is infinite
  rs[1].v.verdict = Verdict::fail;
  rs[1].v.stage = Stage::attention;
  rs[1].v.tensor = "lse";
  rs[1].v.failure = Failure::mismatch;
  rs[1].v.bucket = make_bucket("lowp", "attention", "lse", Failure::mismatch);
  rs[1].v.message = "lse: <worse> & \"quoted\"";
  rs[1].case_file = "out/case 1.json";
  rs[1].repro = repro_command(rs[1].case_file, "lowp");
  ShrinkRecord s;
  s.shrunk = small_case();
  s.shrunk.problem.seqlens = {3};
  s.bucket = rs[1].v.bucket;
  s.file = "out/shrunk.json";
  s.runs = 12;
  s.tp = 4;
  rs[1].shrunk = s;

  rs[2] = rs[1];
  rs[2].index = 2;
  rs[2].shrunk.reset();

  rs[3].index = 3;
  rs[3].origin = "cases/edge/x.json";
  rs[3].c = small_case();
  rs[3].v.verdict = Verdict::not_run;
  rs[3].v.message = "the backend produced none of the checked tensors";
  return rs;
}

TEST(Report, JsonMatchesTheSchema) {
  RunContext ctx;
  ctx.command = "fuzz";
  ctx.arguments = {"fuzz", "--backend", "lowp"};
  ctx.backend = "lowp";
  ctx.profile = "smoke";
  ctx.master_seed = 1;
  ctx.started = utc_now();
  ctx.exit_code = 1;
  const json r = report_json(ctx, sample_records());
  EXPECT_EQ(r["schema"], kReportSchema);
  EXPECT_EQ(r["summary"]["failed"], 2);
  EXPECT_EQ(r["summary"]["passed"], 1);
  EXPECT_EQ(r["summary"]["not_run"], 1);
  ASSERT_EQ(r["summary"]["buckets"].size(), 1u);
  EXPECT_EQ(r["summary"]["buckets"][0]["count"], 2);
  EXPECT_EQ(r["summary"]["buckets"][0]["shrunk_file"], "out/shrunk.json");
  EXPECT_TRUE(r["cases"][1]["tensors"][0]["ratio"].is_null());  // infinite ratio
  EXPECT_EQ(r["cases"][1]["tensors"][0]["worst"]["g"], 17);
  // The passing case is compact in cases, in full among the worst passing cases.
  EXPECT_EQ(r["cases"][0]["compact"], true);
  EXPECT_FALSE(r["cases"][0].contains("tensors"));
  ASSERT_EQ(r["worst_passing"].size(), 1u);
  EXPECT_TRUE(r["worst_passing"][0]["tensors"][0]["worst"].is_null());  // located only when failing
  EXPECT_EQ(r["worst_passing"][0]["not_checked"], json::array({"dq_I"}));
  // Bucket without tags; the tags counted inside it.
  EXPECT_EQ(r["summary"]["buckets"][0]["bucket"], "lowp/attention/lse/mismatch");
  EXPECT_EQ(r["summary"]["buckets"][0]["tags"], (json{{"cp", 2}, {"pad", 2}, {"ties", 2}, {"short-rows", 2}}));
  // The embedded case reproduces the case.
  EXPECT_EQ(case_from_json(r["cases"][1]["case"]).problem.seqlens, (std::vector<int64_t>{5, 11}));
  DSA_EXPECT_MATCHES_SCHEMA(r, "report.schema.json");
}

TEST(Report, SchemaValidatorRejectsABrokenReport) {
  if (!schema_checks_available()) GTEST_SKIP() << "built without valijson (libvalijson-dev)";
  RunContext ctx;
  ctx.command = "fuzz";
  json r = report_json(ctx, sample_records());
  const json s = load_report_schema();
  json bad = r;
  bad["cases"][1]["verdict"] = "ok";
  EXPECT_NE(schema_violation(bad, s), "");
  bad = r;
  bad["context"]["master_seed"] = 1;  // seeds are strings
  EXPECT_NE(schema_violation(bad, s), "");
  bad = r;
  bad["summary"]["buckets"][0]["bucket"] = "lowp/attention/lse";  // not backend/stage/tensor/class
  EXPECT_NE(schema_violation(bad, s), "");
  bad = r;
  bad["summary"].erase("buckets");
  EXPECT_EQ(schema_violation(bad, s), "$.summary: Missing required property 'buckets'.");
  bad = r;
  bad["cases"][1]["tensors"][0]["surprise"] = 1;
  const std::string unknown = schema_violation(bad, s);
  EXPECT_EQ(unknown.rfind("$.cases[1].tensors[0]: ", 0), 0u) << unknown;
  EXPECT_NE(unknown.find("'surprise'"), std::string::npos) << unknown;
  bad = r;
  bad["cases"][1]["tensors"][0]["worst"]["g"] = 1.5;
  EXPECT_NE(schema_violation(bad, s), "");
}

TEST(Report, JunitListsEveryCaseAndEscapes) {
  RunContext ctx;
  ctx.command = "fuzz";
  ctx.backend = "lowp";
  const std::string x = junit_xml(ctx, sample_records());
  EXPECT_NE(x.find("tests=\"4\" failures=\"2\""), std::string::npos);
  size_t testcases = 0;
  for (size_t p = x.find("<testcase"); p != std::string::npos; p = x.find("<testcase", p + 1)) ++testcases;
  EXPECT_EQ(testcases, 4u);
  EXPECT_NE(x.find("&lt;worse&gt; &amp; &quot;quoted&quot;"), std::string::npos);
  EXPECT_EQ(x.find("<worse>"), std::string::npos);
  EXPECT_NE(x.find("<skipped"), std::string::npos);
}

TEST(Report, SummaryTableGroupsByBucket) {
  const std::string t = summary_table(sample_records(), 1.5);
  EXPECT_NE(t.find("lowp/attention/lse/mismatch "), std::string::npos);
  EXPECT_EQ(t.find("mismatch/cp"), std::string::npos);
  EXPECT_NE(t.find("tags: cp:2 pad:2 short-rows:2 ties:2"), std::string::npos) << t;
  EXPECT_NE(t.find("4 cases: 1 passed, 2 failed, 1 not run, 0 cannot run"), std::string::npos);
  EXPECT_NE(t.find("repro: dsa-parity repro 'out/case 1.json' --backend lowp"), std::string::npos);
}

TEST(Report, ReproCommandIsShellQuoted) {
  EXPECT_EQ(repro_command("a/b.json", "mutant:kl_reversed"), "dsa-parity repro a/b.json --backend mutant:kl_reversed");
  EXPECT_EQ(repro_command("x.json", "exec:python3 k.py"), "dsa-parity repro x.json --backend 'exec:python3 k.py'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
}

TEST(Bucket, TagsAndStableFileNames) {
  Case c = small_case();  // cp 2, zigzag, L = [5, 11]: pad rows; ties; 5 < K = 8: short rows
  EXPECT_EQ(feature_tags(c), (std::vector<std::string>{"cp", "pad", "ties", "short-rows"}));
  c.problem.pad_rows = PadRows::masked;
  c.problem.cp.layout = Layout::contiguous;
  c.problem.seqlens = {8, 8};
  c.init.score_ties = false;
  EXPECT_EQ(feature_tags(c), (std::vector<std::string>{"cp", "contiguous"}));  // Tp = 16: no pad
  const std::string b = make_bucket("exec:./k --x", "loss", "kl", Failure::mismatch);
  EXPECT_EQ(b, "exec:./k --x/loss/kl/mismatch");
  EXPECT_EQ(bucket_file_stem(b), "exec_..k_--x.loss.kl.mismatch");
  const std::string long_a = make_bucket(std::string(200, 'a') + "1", "loss", "kl", Failure::mismatch);
  const std::string long_b = make_bucket(std::string(200, 'a') + "2", "loss", "kl", Failure::mismatch);
  EXPECT_LE(bucket_file_stem(long_a).size(), 120u);
  EXPECT_NE(bucket_file_stem(long_a), bucket_file_stem(long_b));
}

TEST(Report, RecordsThePathsOfRandomCases) {
  RunContext ctx;
  ctx.command = "fuzz";
  ctx.paths = {Path::absorbed};
  json r = report_json(ctx, sample_records());
  EXPECT_EQ(r["context"]["paths"], json::array({"absorbed"}));
  ctx.paths = all_paths();
  EXPECT_EQ(report_json(ctx, sample_records())["context"]["paths"], json::array({"absorbed", "explicit"}));
  ctx.command = "replay";  // no random case drawn: null, never an empty or made-up list
  ctx.paths.clear();
  r = report_json(ctx, sample_records());
  EXPECT_TRUE(r["context"]["paths"].is_null());
  if (schema_checks_available()) {  // the schema holds the field to path names, at least one
    const json s = load_report_schema();
    for (const json& bad : {json::array({"bogus"}), json::array(), json::array({"absorbed", "absorbed"})}) {
      json b = r;
      b["context"]["paths"] = bad;
      EXPECT_NE(schema_violation(b, s), "") << bad;
    }
  }
  DSA_EXPECT_MATCHES_SCHEMA(r, "report.schema.json");
}

// A backend that implements the absorbed path only, as the cuda backend does: the lowp reference
// that refuses explicit cases (Unavailable, i.e. cannot-run).
class AbsorbedOnlyBackend final : public Backend {
 public:
  std::string name() const override { return "test:absorbed-only"; }
  std::vector<Path> paths() const override { return {Path::absorbed}; }
  BackendRun run(const Case& c, const PreparedCase& pc) override {
    if (c.problem.path == Path::explicit_) throw Unavailable("implements the absorbed path only");
    return lowp_->run(c, pc);
  }

 private:
  std::unique_ptr<Backend> lowp_ = make_reference_backend("lowp", Precision::bf16);
};

std::string scratch_dir() { return test_dirs::scratch_dir("dsa-report"); }

json read_report(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

TEST(Session, PathFlagValues) {
  EXPECT_EQ(parse_path_flag("absorbed"), std::vector<Path>{Path::absorbed});
  EXPECT_EQ(parse_path_flag("explicit"), std::vector<Path>{Path::explicit_});
  EXPECT_EQ(parse_path_flag("any"), all_paths());
  EXPECT_EQ(parse_path_flag("auto"), std::nullopt);
  try {
    parse_path_flag("bogus");
    ADD_FAILURE() << "--path bogus must be refused";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(e.field, "--path");
    EXPECT_NE(e.rule.find("absorbed|explicit|any"), std::string::npos) << e.rule;
  }
  const auto lowp = make_reference_backend("lowp", Precision::bf16);
  EXPECT_EQ(lowp->paths(), all_paths());
  EXPECT_EQ(session_paths(std::nullopt, *lowp), all_paths());
  EXPECT_EQ(session_paths(std::vector<Path>{Path::explicit_}, *lowp), std::vector<Path>{Path::explicit_});
  AbsorbedOnlyBackend absorbed;
  EXPECT_EQ(session_paths(std::nullopt, absorbed), std::vector<Path>{Path::absorbed});
  for (auto asked : {std::vector<Path>{Path::explicit_}, all_paths()}) {
    try {
      session_paths(asked, absorbed);
      ADD_FAILURE() << "asking for explicit on an absorbed-only backend must be refused";
    } catch (const InvalidInput& e) {
      EXPECT_EQ(e.field, "--path");
      EXPECT_NE(e.rule.find("backend test:absorbed-only implements absorbed only"), std::string::npos) << e.rule;
    }
  }
}

// The problem this solves: by default, fuzz on a backend without the explicit path drew explicit
// cases anyway (smoke seed 1: case 1, 3, 6, ...) and so always exited 3, even with no failure.
TEST(Session, AbsorbedOnlyBackendDrawsNoExplicitCaseAndSaysSo) {
  const std::string d = scratch_dir();
  AbsorbedOnlyBackend backend;
  SessionOptions o;
  o.profile = "smoke";
  o.seed = 1;
  o.cases = 32;
  o.progress = false;
  o.report = d + "/r.json";
  ::testing::internal::CaptureStdout();
  const int code = run_session(o, backend);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("random cases: profile smoke, seed 1, paths absorbed (backend test:absorbed-only implements "
                     "absorbed only)"),
            std::string::npos)
      << out;
  const json rep = read_report(o.report);
  EXPECT_EQ(rep["context"]["paths"], json::array({"absorbed"}));
  ASSERT_EQ(rep["cases"].size(), 32u);
  for (auto& c : rep["cases"]) {
    EXPECT_EQ(c["case"]["path"], "absorbed") << c["description"];
    EXPECT_EQ(c["verdict"], "pass") << c["description"];
  }
  EXPECT_EQ(rep["summary"]["cannot_run"], 0);

  // fuzz selects its corpus by path too: the explicit corpus case is not selected, says so on
  // stdout and in the report, and is neither run nor counted.
  const std::string expl = std::string(DSA_SOURCE_DIR) + "/cases/edge/large_logits_explicit.json";
  o.case_files = {expl};
  o.cases = 3;
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(run_session(o, backend), 0);
  const std::string out2 = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out2.find("corpus case not selected (its path is not among absorbed): " + expl), std::string::npos) << out2;
  const json again = read_report(o.report);
  // Paths in reports are relative to the report's folder.
  const std::string rel = std::filesystem::path(expl).lexically_relative(
      std::filesystem::absolute(o.report).parent_path().lexically_normal()).generic_string();
  EXPECT_EQ(again["context"]["not_selected"], json::array({rel}));
  EXPECT_NE(rel[0], '/');
  EXPECT_EQ(again["cases"].size(), 3u);
  EXPECT_EQ(again["summary"]["cannot_run"], 0);
  DSA_EXPECT_MATCHES_SCHEMA(again, "report.schema.json");

  // replay (no random cases) runs every file: there the explicit case is cannot-run (exit 3).
  o.random = false;
  o.command = "replay";
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(run_session(o, backend), 3);
  ::testing::internal::GetCapturedStdout();
  const json replayed = read_report(o.report);
  EXPECT_EQ(replayed["cases"][0]["verdict"], "cannot-run");
  EXPECT_EQ(replayed["cases"][0]["case"]["path"], "explicit");
  EXPECT_EQ(replayed["summary"]["cannot_run"], 1);
  EXPECT_TRUE(replayed["context"]["not_selected"].empty());
  o.random = true;
  o.command = "fuzz";

  // Asking for the path it lacks is bad usage, before any case runs.
  o.paths = std::vector<Path>{Path::explicit_};
  EXPECT_THROW(run_session(o, backend), InvalidInput);
  DSA_EXPECT_MATCHES_SCHEMA(rep, "report.schema.json");
}


// The streamed report and JUnit (what fuzz writes as cases finish) hold what the whole-run
// functions produce: the same JSON, the same XML up to the blank space reserved for the counts.
std::string slurp_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

std::string squeeze_blanks(const std::string& s) {
  std::string o;
  for (char ch : s)
    if (!(ch == ' ' && !o.empty() && (o.back() == ' ' || o.back() == '>' || o.back() == '"'))) o += ch;
  return o;
}

TEST(ReportStream, StreamedReportAndJunitEqualTheWholeOnes) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("dsa-report-stream-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  RunContext ctx;
  ctx.command = "fuzz";
  ctx.backend = "lowp";
  ctx.profile = "smoke";
  ctx.started = utc_now();
  const std::vector<CaseRecord> records = sample_records();
  const std::string rpath = (dir / "sub" / "r.json").string(), jpath = (dir / "j.xml").string();
  {
    ReportStream report(rpath, ctx, true);
    JunitStream junit(jpath, ctx);
    RunTally t;
    for (auto& r : records) {
      report.add(r);
      junit.add(ctx, r);
      t.add(r);
    }
    // Streamed: the cases are on disk before the end, the target not yet there.
    EXPECT_FALSE(std::filesystem::exists(rpath));
    const std::string partial = rpath + ".partial-" + std::to_string(getpid());
    ASSERT_TRUE(std::filesystem::exists(partial));
    EXPECT_NE(slurp_file(partial).find("\"index\": 3"), std::string::npos);
    ctx.seconds = 12.25;
    ctx.interrupted = true;
    ctx.exit_code = 143;
    report.finish(ctx, t);
    junit.finish(ctx, t);
    EXPECT_FALSE(std::filesystem::exists(partial));
  }
  const json streamed = json::parse(slurp_file(rpath));
  EXPECT_EQ(streamed, report_json(ctx, records));
  EXPECT_EQ(streamed["context"]["seconds"], 12.25);
  EXPECT_EQ(streamed["context"]["interrupted"], true);
  EXPECT_EQ(streamed["summary"]["not_checked_tensors"], 1);
  DSA_EXPECT_MATCHES_SCHEMA(streamed, "report.schema.json");
  const std::string xml = slurp_file(jpath);
  EXPECT_EQ(squeeze_blanks(xml), squeeze_blanks(junit_xml(ctx, records)));
  EXPECT_NE(xml.find("tests=\"4\" failures=\"2\""), std::string::npos);
  EXPECT_NE(xml.find("<property name=\"interrupted\" value=\"true\"/>"), std::string::npos);
  // A stream destroyed unfinished (an error ended the run) leaves no file behind.
  {
    ReportStream report((dir / "gone.json").string(), ctx, false);
    report.add(records[0]);
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "gone.json"));
  EXPECT_FALSE(std::filesystem::exists((dir / "gone.json").string() + ".partial-" + std::to_string(getpid())));
  std::filesystem::remove_all(dir);
}

TEST(ReportStream, OutputPathThatIsADirectoryIsRefusedNamingTheFlag) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  try {
    check_output_file(dir, "--junit");
    ADD_FAILURE() << "a directory was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(e.field, "--junit");
    EXPECT_NE(e.rule.find("is a directory"), std::string::npos) << e.rule;
  }
  EXPECT_THROW(ReportStream("/proc/version/r.json", RunContext{}, false), InvalidInput);
}

TEST(Report, SeedsAreStringsAndCaseFilesTakeBoth) {
  RunContext ctx;
  ctx.master_seed = (uint64_t{1} << 63) + 5;  // not exact as a double
  std::vector<CaseRecord> rs = sample_records();
  rs[1].c.seed = ctx.master_seed;
  const json r = report_json(ctx, rs);
  EXPECT_EQ(r["context"]["master_seed"], "9223372036854775813");
  EXPECT_EQ(r["cases"][1]["case"]["seed"], "9223372036854775813");
  EXPECT_EQ(r["cases"][0]["case"]["seed"], "3");  // compact records too
  EXPECT_EQ(case_from_json(r["cases"][1]["case"]).seed, ctx.master_seed);
  json c = to_json(small_case());
  EXPECT_EQ(case_from_json(c).seed, 3u);  // numbers still accepted
  for (const char* bad : {"-1", "", "12a", "18446744073709551616"}) {
    c["seed"] = bad;
    EXPECT_THROW(case_from_json(c), InvalidInput) << bad;
  }
}

TEST(Report, PassingRecordsAreCompactAndTheWorstAreKeptInFull) {
  const StreamLayout L = make_layout({5, 11}, CpSpec{2, Layout::zigzag, 0});
  TensorD exact({20, 2}, 1.0), lowp = exact;
  lowp.at(3, 1) = 1.1;
  RunContext ctx;
  ctx.command = "fuzz";
  ctx.keep_worst = 3;
  std::vector<CaseRecord> rs;
  for (int i = 0; i < 12; ++i) {
    CaseRecord r;
    r.index = i;
    r.origin = "random smoke seed 1 #" + std::to_string(i);
    r.c = small_case();
    r.c.note = std::string(2000, 'n');  // dropped from compact records
    TensorD fused = exact;
    fused.at(3, 1) = 1.0 + 0.01 * ((i * 7) % 12);  // margins 0 .. 0.55, the worst at i = 11 (0.55)
    for (const char* n : {"lse", "O", "O_lat", "dq_nope", "dq_pe", "dk_pe", "dc", "dW_UK", "dW_UV", "kl", "loss",
                          "dq_I", "dk_I", "dw", "scores", "topk"})
      r.v.checks.push_back(compare_tensor(n, fused, lowp, exact, L));
    rs.push_back(r);
  }
  for (auto& r : rs) {
    const std::string compact = compact_record_json(r).dump();
    EXPECT_LE(compact.size(), 1024u) << compact;
    EXPECT_EQ(compact.find("nnnn"), std::string::npos);
    // The compact case, defaults left out, is still the case.
    EXPECT_EQ(to_json(case_from_json(compact_record_json(r)["case"])), [&] {
      json full = to_json(r.c);
      full.erase("note");
      return full;
    }());
  }
  const json rep = report_json(ctx, rs);
  ASSERT_EQ(rep["worst_passing"].size(), 3u);
  std::vector<int64_t> worst;
  for (auto& w : rep["worst_passing"]) worst.push_back(w["index"].get<int64_t>());
  // (i*7)%12 is 11 at i=5, 10 at i=10, 9 at i=3.
  EXPECT_EQ(worst, (std::vector<int64_t>{5, 10, 3}));
  EXPECT_NEAR(rep["cases"][5]["margins"]["lse"].get<double>(), 0.11 / (2 * 0.1 + 1.1e-6), 0.01);
  ASSERT_FALSE(rep["summary"]["margins"].empty());
  EXPECT_EQ(rep["summary"]["margins"][0]["tensor"], "lse");
  EXPECT_EQ(rep["summary"]["margins"][0]["case"], 5);
  EXPECT_EQ(rep["summary"]["margins"][0]["where"].get<std::string>().rfind("g=3", 0), 0u);
  RunTally t = RunTally::of(rs);
  const std::string table = margin_table(t);
  EXPECT_NE(table.find("lse"), std::string::npos) << table;
  EXPECT_NE(table.find("0.55"), std::string::npos) << table;
  DSA_EXPECT_MATCHES_SCHEMA(rep, "report.schema.json");
}

TEST(Report, JunitNamesComeFromTheCaseNotTheIndex) {
  RunContext ctx;
  ctx.backend = "exec:python3 -m my.kernel --fast";
  std::vector<CaseRecord> rs = sample_records();
  CaseRecord moved = rs[1];
  moved.index = 99;
  moved.c.note = "another origin";
  const std::string a = junit_case_xml(ctx, rs[1]), b = junit_case_xml(ctx, moved);
  const auto name_of = [](const std::string& x) {
    const size_t at = x.find(" name=\"") + 7;
    return x.substr(at, x.find('"', at) - at);
  };
  EXPECT_EQ(name_of(a), name_of(b));  // the same case: the same name, whatever its index
  EXPECT_EQ(name_of(a).rfind("dsa(seed=3 ", 0), 0u) << a;
  EXPECT_NE(name_of(a).find(" #"), std::string::npos);
  moved.c.seed = 4;
  EXPECT_NE(name_of(junit_case_xml(ctx, moved)), name_of(a));
  EXPECT_NE(a.find("classname=\"dsa-parity.exec\""), std::string::npos) << a;
  EXPECT_EQ(a.find("python3"), std::string::npos) << a;
  rs[3].name = "edge/x.json";
  EXPECT_NE(junit_case_xml(ctx, rs[3]).find("name=\"edge/x.json\""), std::string::npos);
}

TEST(Report, ReproLinesCarryTheEnvironmentAndTheOptions) {
  ReproSpec s;
  s.binary = "/opt/my build/dsa-parity";
  s.options = {"--backend", "exec:python3 k.py", "--exec-timeout", "5"};
  s.env = {{"DSA_KEEP_EXEC_DIR", "1"}};
  EXPECT_EQ(repro_line(s, "/tmp/c.json"),
            "DSA_KEEP_EXEC_DIR=1 '/opt/my build/dsa-parity' repro /tmp/c.json --backend 'exec:python3 k.py' "
            "--exec-timeout 5");
  setenv("DSA_REPRO_TEST_VAR", "a b", 1);
  setenv("DSA_GIT_SHA", "abc", 1);
  const auto env = repro_environment();
  unsetenv("DSA_REPRO_TEST_VAR");
  unsetenv("DSA_GIT_SHA");
  EXPECT_NE(std::find(env.begin(), env.end(), std::make_pair(std::string("DSA_REPRO_TEST_VAR"), std::string("a b"))),
            env.end());
  for (auto& [k, v] : env) EXPECT_NE(k, "DSA_GIT_SHA");
  EXPECT_EQ(relative_to("/a/b/c/d.json", "/a/b"), "c/d.json");
  EXPECT_EQ(relative_to("/a/x.json", "/a/b"), "../x.json");
  // A corpus file whose path from the report's folder would climb to the root (and so spell out
  // the machine's folders) is named from the corpus instead; every other path stays relative.
  EXPECT_EQ(report_path("/work/main/cases/edge/x.json", "/tmp/tmp.ab", "/work/main/cases"), "corpus edge/x.json");
  EXPECT_EQ(report_path("/work/main/cases/edge/x.json", "/tmp/tmp.ab/", "/work/main/cases/"), "corpus edge/x.json");
  EXPECT_EQ(report_path("/work/main/cases/edge/x.json", "/work/out", "/work/main/cases"), "../main/cases/edge/x.json");
  EXPECT_EQ(report_path("/work/main/cases/edge/x.json", "/tmp/tmp.ab", ""), "../../work/main/cases/edge/x.json");
  EXPECT_EQ(report_path("/other/y.json", "/tmp/tmp.ab", "/work/main/cases"), "../../other/y.json");  // not a corpus file
  EXPECT_EQ(report_path("/tmp/tmp.ab/out/case-1.json", "/tmp/tmp.ab", "/work/main/cases"), "out/case-1.json");
  EXPECT_TRUE(is_corpus_relative("corpus edge/x.json"));
  EXPECT_FALSE(is_corpus_relative("../corpus/x.json"));
  set_invoked_binary("build/dsa-parity");
  EXPECT_EQ(invoked_binary(), (std::filesystem::current_path() / "build/dsa-parity").string());
  set_invoked_binary("dsa-parity");
  EXPECT_EQ(invoked_binary(), "dsa-parity");
}

TEST(Report, ContextRecordsTheBuild) {
  const json e = environment_json();
  EXPECT_NE(e["git_sha"], "HEAD");
  EXPECT_FALSE(e["git_sha"].get<std::string>().empty());
  EXPECT_TRUE(e["git_dirty"].is_boolean());
  EXPECT_NE(e["build_type"], "");
  setenv("DSA_GIT_SHA", "0123abc-dirty", 1);
  const json g = environment_json();
  unsetenv("DSA_GIT_SHA");
  EXPECT_EQ(g["git_sha"], "0123abc");
  EXPECT_EQ(g["git_dirty"], true);
}

TEST(Report, HtmlSummaryNamesEveryTensorAndBucket) {
  RunContext ctx;
  ctx.backend = "lowp";
  const RunTally t = RunTally::of(sample_records());
  const std::string h = html_summary(ctx, t);
  EXPECT_EQ(h.rfind("<?xml", 0), 0u);
  EXPECT_NE(h.find("<svg"), std::string::npos);
  EXPECT_NE(h.find("lowp/attention/lse/mismatch"), std::string::npos);
  for (auto& m : t.margins) EXPECT_NE(h.find(">" + m.stage + " " + m.tensor + "<"), std::string::npos) << m.tensor;
  for (const char* external : {"<script", "<link", "src=", "href=", "url("})  // no external asset, no script
    EXPECT_EQ(h.find(external), std::string::npos) << external;
}

TEST(Session, RunIdNamesTimePidAndSeed) {
  const std::string id = run_id(7);
  EXPECT_EQ(id.size(), std::string("20261203T081500Z").size() + 1 + std::to_string(getpid()).size() + 6);
  EXPECT_EQ(id.substr(16), "-" + std::to_string(getpid()) + "-seed7");
  EXPECT_EQ(id[8], 'T');
  EXPECT_EQ(id[15], 'Z');
  EXPECT_EQ(run_id(7, Shard{0, 1}).substr(16), "-" + std::to_string(getpid()) + "-seed7");
  EXPECT_EQ(run_id(7, Shard{1, 4}).substr(16), "-" + std::to_string(getpid()) + "-seed7-shard1of4");
}

// ---- reports read back (harness/report_read.hpp), what dsa-parity merge stands on

TEST(ReportRead, RecordsComeBackAsTheyWereWritten) {
  std::vector<CaseRecord> rs = sample_records();
  rs[3].name = "edge/x.json";  // a case file: its JUnit name cannot be derived from the case
  for (auto& r : rs) {
    const json full = record_json(r);
    EXPECT_EQ(record_json(record_from_json(full)), full) << full.dump();
  }
  // A random case's name is derived from the case, not written; a case file's is written.
  EXPECT_FALSE(record_json(rs[0]).contains("name"));
  EXPECT_EQ(record_from_json(record_json(rs[0])).name, random_case_name(rs[0].c));
  EXPECT_EQ(record_json(rs[3])["name"], "edge/x.json");
  EXPECT_EQ(record_from_json(compact_record_json(rs[3])).name, "edge/x.json");
  // A compact record keeps its margins: written again, it is the same record.
  const json compact = compact_record_json(rs[0]);
  const CaseRecord back = record_from_json(compact);
  EXPECT_EQ(compact_record_json(back), compact);
  EXPECT_EQ(back.v.verdict, Verdict::pass);
  ASSERT_EQ(back.v.checks.size(), 1u);  // dq_I was not checked: compact records leave it out
  EXPECT_EQ(back.v.checks[0].stage, Stage::attention);
  EXPECT_EQ(record_margin(back.v), compact["margins"]["lse"].get<double>());
  // The JUnit testcase of a record read back is the one of the record written.
  RunContext ctx;
  ctx.backend = "lowp";
  for (auto& r : rs) EXPECT_EQ(junit_case_xml(ctx, record_from_json(record_json(r))), junit_case_xml(ctx, r));
}

TEST(ReportRead, TalliesOfShardsMergeIntoTheTallyOfTheWholeRun) {
  std::vector<CaseRecord> rs = sample_records();
  CaseRecord other = rs[2];  // a second bucket, first seen in the second half
  other.index = 4;
  other.v.bucket = make_bucket("lowp", "loss", "kl", Failure::nan);
  other.v.failure = Failure::nan;
  rs.push_back(other);
  RunContext ctx;
  ctx.exit_code = 1;
  const json whole = summary_json(ctx, RunTally::of(rs));
  // The summary read back is the same summary.
  EXPECT_EQ(summary_json(ctx, tally_from_json(whole)), whole);
  // Cases i % 2 == 0 and i % 2 == 1 (shards 0/2 and 1/2), merged in either order.
  std::vector<CaseRecord> even, odd;
  for (auto& r : rs) (r.index % 2 ? odd : even).push_back(r);
  const json a = summary_json(ctx, RunTally::of(even)), b = summary_json(ctx, RunTally::of(odd));
  for (bool a_first : {true, false}) {
    RunTally m = tally_from_json(a_first ? a : b);
    m.merge(tally_from_json(a_first ? b : a));
    EXPECT_EQ(summary_json(ctx, m), whole) << "a first: " << a_first;
  }
  ASSERT_EQ(whole["buckets"].size(), 2u);
  EXPECT_EQ(whole["buckets"][0]["count"], 2);
  EXPECT_EQ(whole["buckets"][0]["first_case"], 1);
  EXPECT_EQ(whole["buckets"][0]["shrunk_file"], "out/shrunk.json");  // case 1's, in the odd half
}

TEST(ReportRead, WorstPassingKeepsTheSameCasesWhateverTheOrder) {
  const std::vector<std::pair<double, int64_t>> offered = {{0.5, 3}, {0.5, 1}, {0.7, 2}, {0.5, 0}, {0.1, 4}};
  for (bool reversed : {false, true}) {
    WorstPassing w(2);
    auto order = offered;
    if (reversed) std::reverse(order.begin(), order.end());
    for (auto [m, i] : order) w.add(m, i, json{{"index", i}});
    std::vector<int64_t> kept;
    for (auto& r : w.sorted()) kept.push_back(r["index"].get<int64_t>());
    EXPECT_EQ(kept, (std::vector<int64_t>{2, 0})) << "reversed: " << reversed;  // ties: the earlier case
  }
}

TEST(ReportRead, RefusesWhatIsNotAReportNamingTheFile) {
  const std::string d = scratch_dir();
  RunContext ctx;
  ctx.command = "fuzz";
  json good = report_json(ctx, sample_records());
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(d + "/" + name) << text;
    return d + "/" + name;
  };
  const std::string ok = write("ok.json", good.dump());
  EXPECT_EQ(dsa::read_report(ok, ok), good);
  json v2 = good;
  v2["schema"] = "dsa-parity/report/v2";
  const std::pair<std::string, std::string> bad[] = {
      {write("truncated.json", good.dump().substr(0, 100)), "is not valid JSON"},
      {write("duplicate.json", R"({"schema": "dsa-parity/report/v1", "schema": "x"})"), "is not valid JSON"},
      {write("array.json", "[1, 2]"), "is not a dsa-parity report"},
      {write("case.json", to_json(small_case()).dump()), "is not a dsa-parity report"},
      {write("v2.json", v2.dump()), "this dsa-parity reads dsa-parity/report/v1 reports only"},
      {write("nocases.json", R"({"schema": "dsa-parity/report/v1", "context": {}, "summary": {}})"), "no \"cases\""},
      {d + "/missing.json", "does not exist"},
      {d, "is not a regular file"},
  };
  for (auto& [path, rule] : bad) {
    try {
      dsa::read_report(path, path);
      ADD_FAILURE() << path << " was read";
    } catch (const InvalidInput& e) {
      EXPECT_EQ(e.field.rfind(path, 0), 0u) << e.what();
      EXPECT_NE(e.rule.find(rule), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(d);
}

}  // namespace report_test
}  // namespace
}  // namespace dsa
