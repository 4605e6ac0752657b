#include "harness/report_read.hpp"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/catalogue.hpp"
#include "core/errors.hpp"
#include "harness/strict_json.hpp"

namespace dsa {

using nlohmann::json;

namespace {

// Reports write non-finite numbers as null (report.cpp): they come back as NaN, which the writer
// writes as null again; `infinite` where null stands for +inf (a margin).
double number(const json& j, double null_as = std::numeric_limits<double>::quiet_NaN()) {
  return j.is_null() ? null_as : j.get<double>();
}
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string text_or_empty(const json& j) { return j.is_null() ? std::string() : j.get<std::string>(); }

template <class E, class F>
E enum_of(const json& j, F parse, const char* what) {
  const std::string s = j.get<std::string>();
  const auto v = parse(s);
  if (!v) throw InvalidInput(what, "unknown value '" + s + "'");
  return *v;
}

CheckStatus status_of(const json& j) {
  return enum_of<CheckStatus>(j, [](const std::string& s) -> std::optional<CheckStatus> {
    for (CheckStatus c : {CheckStatus::pass, CheckStatus::fail, CheckStatus::not_checked})
      if (s == name(c)) return c;
    return std::nullopt;
  }, "status");
}

Stage stage_of(const json& j) { return enum_of<Stage>(j, [](const std::string& s) { return parse_stage(s); }, "stage"); }

// A compact record's check: only its margin survives.
TensorCheck margin_check(const std::string& tensor, double margin) {
  const TensorSpec* spec = find_tensor(tensor);
  require(spec != nullptr, "margins", "unknown tensor '" + tensor + "'");
  TensorCheck t;
  t.stage = spec->stage;
  t.tensor = tensor;
  t.alpha = 1;
  t.floor = 1;
  t.e_f = t.ratio = margin;
  return t;
}

uint64_t seed_of(const json& j) {
  const std::string s = j.get<std::string>();
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  require(ec == std::errc() && end == s.data() + s.size() && !s.empty(), "context.master_seed",
          "must be a string of decimal digits");
  return v;
}

}  // namespace

json read_report(const std::string& path, const std::string& field) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // A FIFO or a directory is refused before it is opened (reading a FIFO would block).
  require(fs::exists(path, ec), field, "does not exist");
  require(fs::is_regular_file(path, ec), field, "is not a regular file");
  std::ifstream f(path, std::ios::binary);
  std::stringstream text;
  text << f.rdbuf();
  require(f.good() || f.eof(), field, "cannot be read");
  json j;
  try {
    j = parse_strict_json(text.str());
  } catch (const JsonRefused& e) {
    throw InvalidInput(field, std::string("is not valid JSON: ") + e.what());
  }
  const std::string schema = j.is_object() && j.contains("schema") && j["schema"].is_string() ? j["schema"].get<std::string>() : "";
  const std::string family = "dsa-parity/report/";
  require(schema.rfind(family, 0) == 0, field,
          "is not a dsa-parity report (no \"schema\": \"" + std::string(kReportSchema) + "\")");
  require(schema == kReportSchema, field + ": schema",
          "is '" + schema + "': this dsa-parity reads " + kReportSchema + " reports only");
  for (const char* part : {"context", "summary"})
    require(j.contains(part) && j[part].is_object(), field, std::string("is not a dsa-parity report: no \"") + part + "\" object");
  require(j.contains("cases") && j["cases"].is_array(), field, "is not a dsa-parity report: no \"cases\" array");
  return j;
}

TensorCheck check_from_json(const json& j) {
  TensorCheck t;
  t.stage = stage_of(j.at("stage"));
  t.tensor = j.at("tensor").get<std::string>();
  t.status = status_of(j.at("status"));
  if (!j.at("class").is_null()) t.failure = enum_of<Failure>(j["class"], [](const std::string& s) { return parse_failure(s); }, "class");
  t.detail = j.at("detail").get<std::string>();
  t.alpha = number(j.at("alpha"));
  t.floor = number(j.at("floor"));
  t.e_f = number(j.at("e_f"));
  t.e_l = number(j.at("e_l"));
  t.ratio = number(j.at("ratio"));
  t.max_rel = number(j.at("max_rel_err"));
  t.cosine = number(j.at("cosine"));
  t.rmse = number(j.at("rmse"));
  t.compared = j.at("compared").get<int64_t>();
  if (j.contains("repeat")) {
    const json& r = j["repeat"];
    TensorCheck::Repeat x;
    x.runs = r.at("runs").get<int>();
    x.deterministic = r.at("deterministic").get<bool>();
    x.differing = r.at("differing").get<int64_t>();
    x.spread = number(r.at("spread"), kInf);
    x.spread_ratio = number(r.at("spread_ratio"), kInf);
    x.rejudged = r.value("rejudged", 0);  // reports before it had none
    t.repeat = x;
  }
  const json& w = j.at("worst");
  if (!w.is_null()) {
    Location l;
    l.index = w.at("index").get<std::vector<int64_t>>();
    l.g = w.at("g").get<int64_t>();
    l.rank = w.at("rank").get<int64_t>();
    l.local = w.at("local").get<int64_t>();
    l.sequence = w.at("sequence").get<int64_t>();
    l.position = w.at("position").get<int64_t>();
    l.head = w.at("head").get<int64_t>();
    l.dim = w.at("dim").get<int64_t>();
    t.worst = l;
    t.worst_fused = number(w.at("fused"));
    t.worst_exact = number(w.at("exact"));
    t.worst_lowp = number(w.at("lowp"));
  }
  return t;
}

std::vector<OracleAgreement> agreement_from_json(const json& rows) {
  std::vector<OracleAgreement> out;
  for (const json& x : rows) {
    OracleAgreement a;
    a.tensor = x.at("tensor").get<std::string>();
    a.exact_rel = number(x.at("exact_rel"), kInf);
    a.lowp_ratio = number(x.at("lowp_ratio"), kInf);
    a.e_l_a = number(x.at("e_l_authority"), kInf);
    a.e_l_b = number(x.at("e_l_second"), kInf);
    a.compared = x.at("compared").get<int64_t>();
    a.detail = x.at("detail").get<std::string>();
    out.push_back(std::move(a));
  }
  return out;
}

CaseRecord record_from_json(const json& j) {
  CaseRecord r;
  r.index = j.at("index").get<int64_t>();
  r.origin = j.at("origin").get<std::string>();
  r.c = case_from_json(j.at("case"));
  r.name = j.contains("name") ? j["name"].get<std::string>() : random_case_name(r.c);
  const json& t = j.at("timings");
  r.v.generate_s = t.contains("generate_s") ? number(t["generate_s"], 0) : 0;
  r.v.backend_s = number(t.at("backend_s"), 0);
  r.v.oracle_s = number(t.at("oracle_s"), 0);
  r.v.compare_s = number(t.at("compare_s"), 0);
  if (j.value("compact", false)) {
    r.v.verdict = Verdict::pass;
    for (auto& [tensor, m] : j.at("margins").items()) r.v.checks.push_back(margin_check(tensor, number(m, kInf)));
    return r;
  }
  r.v.verdict = enum_of<Verdict>(j.at("verdict"), [](const std::string& s) { return parse_verdict(s); }, "verdict");
  r.v.bucket = text_or_empty(j.at("bucket"));
  r.v.message = j.at("message").get<std::string>();
  const json& f = j.at("failure");
  if (!f.is_null()) {
    if (f.at("stage") != "run") r.v.stage = stage_of(f["stage"]);
    r.v.tensor = f.at("tensor").get<std::string>();
    r.v.failure = enum_of<Failure>(f.at("class"), [](const std::string& s) { return parse_failure(s); }, "failure.class");
  }
  for (auto& c : j.at("tensors")) r.v.checks.push_back(check_from_json(c));
  if (j.contains("oracle_agreement")) r.v.oracle_agreement = agreement_from_json(j["oracle_agreement"]);
  r.repro = text_or_empty(j.at("repro"));
  r.case_file = text_or_empty(j.at("case_file"));
  r.unfinished = j.value("unfinished", false);
  const json& s = j.at("shrunk");
  if (!s.is_null()) {
    ShrinkRecord k;
    k.shrunk = case_from_json(s.at("case"));
    k.bucket = s.at("bucket").get<std::string>();
    k.file = s.at("file").get<std::string>();
    k.runs = s.at("runs").get<int64_t>();
    k.seconds = s.at("seconds").get<double>();
    k.tp = s.at("tp").get<int64_t>();
    r.shrunk = k;
  }
  return r;
}

RunContext context_from_json(const json& report) {
  const json& c = report.at("context");
  RunContext ctx;
  ctx.command = c.at("command").get<std::string>();
  ctx.arguments = c.at("arguments").get<std::vector<std::string>>();
  ctx.backend = c.at("backend").get<std::string>();
  ctx.oracle = c.value("oracle", "cpu");
  ctx.profile = c.at("profile").get<std::string>();
  ctx.master_seed = seed_of(c.at("master_seed"));
  if (c.contains("paths") && c["paths"].is_array())
    for (auto& p : c["paths"]) ctx.paths.push_back(parse_path(p.get<std::string>(), "context.paths"));
  ctx.not_selected = c.value("not_selected", std::vector<std::string>{});
  ctx.started = c.at("started").get<std::string>();
  ctx.seconds = c.at("seconds").get<double>();
  ctx.interrupted = c.value("interrupted", false);
  ctx.repeat = c.value("repeat", 1);
  ctx.backend_ahead = c.value("backend_ahead", false);
  if (c.contains("shard")) ctx.shard = Shard{c["shard"].at("index").get<int64_t>(), c["shard"].at("count").get<int64_t>()};
  if (c.contains("merged")) ctx.merged = c["merged"];
  ctx.rank_devices = c.value("rank_devices", std::vector<std::string>{});
  // The environment as the report recorded it: the keys environment_json() writes.
  ctx.environment = json::object();
  const json here = environment_json();  // (a named object: items() of a temporary would dangle)
  for (auto& [k, v] : here.items())
    if (c.contains(k)) ctx.environment[k] = c[k];
  const json& s = report.at("summary");
  ctx.exit_code = s.at("exit_code").get<int>();
  ctx.maxfail_reached = s.value("maxfail_reached", false);
  return ctx;
}

RunTally tally_from_json(const json& s) {
  RunTally t;
  t.cases = s.at("cases").get<int64_t>();
  t.passed = s.at("passed").get<int64_t>();
  t.failed = s.at("failed").get<int64_t>();
  t.not_run = s.at("not_run").get<int64_t>();
  t.cannot_run = s.at("cannot_run").get<int64_t>();
  t.unfinished = s.value("unfinished", int64_t{0});
  t.not_checked_tensors = s.value("not_checked_tensors", int64_t{0});
  t.not_checked_cases = s.value("not_checked_cases", int64_t{0});
  for (auto& b : s.at("buckets")) {
    RunTally::Bucket x;
    x.bucket = b.at("bucket").get<std::string>();
    x.count = b.at("count").get<int64_t>();
    x.first_case = b.at("first_case").get<int64_t>();
    x.repro = b.at("repro").get<std::string>();
    x.stage = b.at("stage").get<std::string>();
    x.tensor = b.at("tensor").get<std::string>();
    x.failure_class = b.at("class").get<std::string>();
    x.shrunk_file = text_or_empty(b.at("shrunk_file"));
    x.tags = b.value("tags", std::map<std::string, int64_t>{});
    t.add_bucket(x);
  }
  for (auto& m : s.value("margins", json::array())) {
    RunTally::Margin x;
    x.stage = m.at("stage").get<std::string>();
    x.tensor = m.at("tensor").get<std::string>();
    x.description = m.value("description", "");
    x.where = m.at("where").get<std::string>();
    x.worst = number(m.at("worst_margin"), kInf);
    x.case_index = m.at("case").get<int64_t>();
    t.add_margin(x);
  }
  if (s.contains("coverage")) t.coverage = coverage_from_json(s["coverage"]);
  if (s.contains("timings")) {
    const json& x = s["timings"];
    t.generate_s = x.at("generate_s").get<double>();
    t.backend_s = x.at("backend_s").get<double>();
    t.oracle_s = x.at("oracle_s").get<double>();
    t.compare_s = x.at("compare_s").get<double>();
  }
  if (s.contains("oracle_agreement")) {
    const json& a = s["oracle_agreement"];
    t.oracle_agreement = agreement_from_json(a.at("rows"));
    t.oracle_disagreements = a.at("disagreeing_cases").get<int64_t>();
    t.first_disagreement = a.at("first_case").is_null() ? -1 : a["first_case"].get<int64_t>();
  }
  return t;
}

}  // namespace dsa
