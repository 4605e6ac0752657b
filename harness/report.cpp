#include "harness/report.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

#include "harness/backend.hpp"
#include "harness/bucket.hpp"
#include "harness/build_info.hpp"
#include "core/errors.hpp"
#include "harness/text.hpp"

#ifdef DSA_HAVE_CUDA
#include "fused/comm/comm.hpp"
#include "fused/device.hpp"
#endif

extern char** environ;

namespace dsa {

using nlohmann::json;

namespace {

// JSON has no infinities or NaN: they are written as null (the schema allows it).
json num(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// The MLA paths random cases were drawn from, by name; null when the run drew no random case
// (replay, repro), where an empty list would read as "no path allowed".
json paths_json(const std::vector<Path>& paths) {
  if (paths.empty()) return nullptr;
  json a = json::array();
  for (Path p : paths) a.push_back(name(p));
  return a;
}

// Backend messages and paths come from outside: valid UTF-8 first, then escaped (text::xml_escape).
using text::xml_escape;

}  // namespace

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json environment_json() {
  json e;
  // DSA_GIT_SHA names the commit at run time (a tree that travels without its .git, a device
  // machine); else `git describe --always --dirty` captured by CMake at configure time.
  const char* given = std::getenv("DSA_GIT_SHA");
  std::string sha = given && *given ? given : build_info::git_describe();
  bool dirty = false;
  const std::string suffix = "-dirty";
  if (sha.size() > suffix.size() && sha.compare(sha.size() - suffix.size(), suffix.size(), suffix) == 0) {
    sha.resize(sha.size() - suffix.size());
    dirty = true;
  }
  if (sha.empty() || sha == "HEAD") sha = "unknown";
  e["git_sha"] = sha;
  e["git_dirty"] = dirty;
  const std::string build_type = build_info::build_type();
  e["build_type"] = build_type.empty() ? "unknown" : build_type;
  e["compile_flags"] = trim(build_info::compile_flags());
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  e["host"] = host;
#ifdef DSA_HAVE_CUDA
  // What a figure needs to be traced: the device, its arch, the driver and runtime, NCCL.
  const int n = fused::device_count();
  const std::string driver = fused::driver_version();
  e["cuda"] = "runtime " + fused::runtime_version() + ", driver " + (driver.empty() ? "none" : driver);
  e["gpu"] = n > 0 ? fused::device_name(0) + " (" + fused::device_arch(0) + ")" +
                         (n > 1 ? " x" + std::to_string(n) : std::string())
                   : "none";
  e["nccl"] = fused::nccl_version();
#else
  e["cuda"] = "not built";
  e["gpu"] = "none";
  e["nccl"] = "not built";
#endif
  return e;
}

namespace {

// The case as reports hold it: its seed a string (uint64 seeds lose bits as JSON numbers).
json case_json(const Case& c) {
  json j = to_json(c);
  j["seed"] = std::to_string(c.seed);
  return j;
}

// A number rounded to `digits` significant digits (compact records stay small).
json rounded(double x, int digits) {
  if (!std::isfinite(x)) return nullptr;
  char b[40];
  std::snprintf(b, sizeof b, "%.*g", digits, x);
  return json(std::strtod(b, nullptr));
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// The JUnit name of a case read from a file (its path in the corpus) cannot be derived from the
// case: records keep it, so that a report read back (dsa-parity merge) names it the same. A random
// case's name is derived from the case (random_case_name) and is not written.
void put_name(json& j, const CaseRecord& r) {
  if (!r.name.empty() && r.name != random_case_name(r.c)) j["name"] = r.name;
}

}  // namespace

double record_margin(const CaseVerdict& v) {
  double m = -1;
  for (auto& t : v.checks)
    if (t.status != CheckStatus::not_checked) m = std::max(m, margin_of(t));
  return m;
}

double margin_of(const TensorCheck& t) {
  const double d = t.alpha * t.e_l + t.floor;
  if (std::isnan(t.e_f)) return std::numeric_limits<double>::infinity();
  if (d > 0) return t.e_f / d;
  return t.e_f > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}

std::string where_of(const TensorCheck& t) {
  if (!t.worst) return "";
  const Location& w = *t.worst;
  std::string o = "g=" + std::to_string(w.g);
  if (w.head >= 0) o += " head=" + std::to_string(w.head);
  if (w.dim >= 0) o += " dim=" + std::to_string(w.dim);
  return o;
}

std::string random_case_name(const Case& c) {
  Case bare = c;
  bare.note.clear();  // the note says where the case came from, not what it is
  char b[16];
  std::snprintf(b, sizeof b, "%08llx", static_cast<unsigned long long>(fnv1a(to_json(bare).dump()) & 0xffffffffull));
  return describe(c) + " #" + b;
}

std::string backend_kind(const std::string& backend) { return backend.substr(0, backend.find(':')); }

json check_json(const TensorCheck& t) {
  json j = {{"stage", name(t.stage)},
            {"tensor", t.tensor},
            {"status", name(t.status)},
            {"class", t.failure == Failure::none ? json(nullptr) : json(name(t.failure))},
            {"detail", t.detail},
            {"alpha", t.alpha},
            {"floor", num(t.floor)},
            {"e_f", num(t.e_f)},
            {"e_l", num(t.e_l)},
            {"ratio", num(t.ratio)},
            {"max_abs_err", num(t.e_f)},
            {"max_rel_err", num(t.max_rel)},
            {"cosine", num(t.cosine)},
            {"rmse", num(t.rmse)},
            {"compared", t.compared}};
  if (t.repeat)
    j["repeat"] = {{"runs", t.repeat->runs},
                   {"deterministic", t.repeat->deterministic},
                   {"differing", t.repeat->differing},
                   {"spread", num(t.repeat->spread)},
                   {"spread_ratio", num(t.repeat->spread_ratio)},
                   {"rejudged", t.repeat->rejudged}};
  // The worst element of failing tensors only: a long run has tens of thousands of passing cases.
  if (t.worst && t.failed()) {
    const Location& w = *t.worst;
    j["worst"] = {{"index", w.index}, {"g", w.g},       {"rank", w.rank},
                  {"local", w.local}, {"sequence", w.sequence}, {"position", w.position},
                  {"head", w.head},   {"dim", w.dim},   {"fused", num(t.worst_fused)},
                  {"exact", num(t.worst_exact)},        {"lowp", num(t.worst_lowp)}};
  } else {
    j["worst"] = nullptr;
  }
  return j;
}

json record_json(const CaseRecord& r) {
  const CaseVerdict& v = r.v;
  json tensors = json::array(), not_checked = json::array();
  for (auto& t : v.checks) {
    tensors.push_back(check_json(t));
    if (t.status == CheckStatus::not_checked) not_checked.push_back(t.tensor);
  }
  json j = {{"index", r.index},
            {"origin", text::safe(r.origin, 4000)},
            {"description", describe(r.c)},
            {"case", case_json(r.c)},
            {"verdict", name(v.verdict)},
            {"bucket", v.bucket.empty() ? json(nullptr) : json(v.bucket)},
            {"message", text::safe(v.message, 16000)},  // a backend's words: valid UTF-8, capped
            {"tensors", tensors},
            {"not_checked", not_checked},
            {"timings",
             {{"generate_s", v.generate_s}, {"backend_s", v.backend_s}, {"oracle_s", v.oracle_s}, {"compare_s", v.compare_s}}},
            {"repro", r.repro.empty() ? json(nullptr) : json(r.repro)},
            {"case_file", r.case_file.empty() ? json(nullptr) : json(r.case_file)},
            {"unfinished", r.unfinished}};
  if (!v.oracle_agreement.empty()) j["oracle_agreement"] = agreement_json(v.oracle_agreement);
  j["failure"] = v.failed() ? json{{"stage", v.stage_name()}, {"tensor", v.tensor}, {"class", name(v.failure)}} : json(nullptr);
  if (r.shrunk) {
    const ShrinkRecord& s = *r.shrunk;
    j["shrunk"] = {{"case", case_json(s.shrunk)}, {"description", describe(s.shrunk)}, {"bucket", s.bucket},
                   {"file", s.file},            {"runs", s.runs},                    {"seconds", s.seconds},
                   {"tp", s.tp}};
  } else {
    j["shrunk"] = nullptr;
  }
  put_name(j, r);
  return j;
}

json agreement_json(const std::vector<OracleAgreement>& rows) {
  json a = json::array();
  for (auto& x : rows)
    a.push_back({{"tensor", x.tensor},
                 {"exact_rel", num(x.exact_rel)},
                 {"lowp_ratio", num(x.lowp_ratio)},
                 {"e_l_authority", num(x.e_l_a)},
                 {"e_l_second", num(x.e_l_b)},
                 {"compared", x.compared},
                 {"agrees", x.agrees()},
                 {"detail", x.detail}});
  return a;
}

json compact_record_json(const CaseRecord& r) {
  // The case without its note and without the fields at their defaults (case_from_json fills them in).
  json c = case_json(r.c);
  c.erase("note");
  static const json defaults = to_json(Case{});
  for (auto it = defaults.begin(); it != defaults.end(); ++it) {
    const std::string& k = it.key();
    if (k == "schema" || k == "seed" || k == "seqlens" || k == "softmax_scale" || k == "path" ||
        !c.contains(k))
      continue;
    if (c[k] == *it) c.erase(k);
    else if (it->is_object())
      for (auto f = it->begin(); f != it->end(); ++f)
        if (c[k].contains(f.key()) && c[k][f.key()] == *f) c[k].erase(f.key());
  }
  json margins = json::object();
  for (auto& t : r.v.checks)
    if (t.status != CheckStatus::not_checked) margins[t.tensor] = rounded(margin_of(t), 3);
  json j = {{"index", r.index},
            {"origin", text::safe(r.origin, 300)},
            {"description", describe(r.c)},
            {"verdict", name(r.v.verdict)},
            {"compact", true},
            {"case", c},
            {"timings", {{"generate_s", rounded(r.v.generate_s, 3)}, {"backend_s", rounded(r.v.backend_s, 3)},
                         {"oracle_s", rounded(r.v.oracle_s, 3)}, {"compare_s", rounded(r.v.compare_s, 3)}}},
            {"margins", margins}};
  put_name(j, r);
  return j;
}

json report_record_json(const CaseRecord& r) {
  // Oracles that disagree keep the full record: its oracle_agreement says where.
  return r.v.verdict == Verdict::pass && !r.unfinished && !r.v.oracles_disagree() ? compact_record_json(r) : record_json(r);
}

namespace {
// Worse: a larger margin, or the same margin at an earlier case (so that the N kept do not depend on
// the order the cases come in: a merge offers them shard by shard).
bool worse(double m, int64_t i, double than_m, int64_t than_i) { return m > than_m || (m == than_m && i < than_i); }
}  // namespace

bool WorstPassing::kept(double margin, int64_t index) const {
  if (n_ <= 0) return false;
  return static_cast<int64_t>(heap_.size()) < n_ || worse(margin, index, heap_.front().margin, heap_.front().index);
}

void WorstPassing::add(const CaseRecord& r) {
  if (r.v.verdict != Verdict::pass) return;
  const double m = record_margin(r.v);
  if (kept(m, r.index)) add(m, r.index, record_json(r));  // the full record only when it stays
}

void WorstPassing::add(double margin, int64_t index, const json& full_record) {
  if (!kept(margin, index)) return;
  auto cmp = [](const Entry& a, const Entry& b) { return worse(a.margin, a.index, b.margin, b.index); };
  if (static_cast<int64_t>(heap_.size()) >= n_) {
    std::pop_heap(heap_.begin(), heap_.end(), cmp);
    heap_.pop_back();
  }
  heap_.push_back({margin, index, full_record.dump(-1, ' ', false, json::error_handler_t::replace)});
  std::push_heap(heap_.begin(), heap_.end(), cmp);
}

json WorstPassing::sorted() const {
  auto v = heap_;
  std::sort(v.begin(), v.end(), [](const Entry& a, const Entry& b) { return worse(a.margin, a.index, b.margin, b.index); });
  json a = json::array();
  for (auto& e : v) a.push_back(json::parse(e.record));
  return a;
}

void RunTally::add(const CaseRecord& r) {
  ++cases;
  coverage.add(r.c);
  switch (r.v.verdict) {
    case Verdict::pass: ++passed; break;
    case Verdict::fail: ++failed; break;
    case Verdict::not_run: ++not_run; break;
    case Verdict::cannot_run: ++cannot_run; break;
  }
  unfinished += r.unfinished;
  int64_t unchecked = 0;
  for (auto& t : r.v.checks) unchecked += t.status == CheckStatus::not_checked;
  not_checked_tensors += unchecked;
  not_checked_cases += unchecked > 0;
  case_seconds += r.v.generate_s + r.v.backend_s + r.v.oracle_s + r.v.compare_s;
  generate_s += r.v.generate_s, backend_s += r.v.backend_s, oracle_s += r.v.oracle_s, compare_s += r.v.compare_s;
  if (!r.v.oracle_agreement.empty()) {
    merge_agreement(oracle_agreement, r.v.oracle_agreement);
    if (r.v.oracles_disagree() && oracle_disagreements++ == 0) first_disagreement = r.index;
  }
  for (auto& t : r.v.checks) {
    if (t.status == CheckStatus::not_checked) continue;
    Margin& m = margin_row(name(t.stage), t.tensor);
    const double x = margin_of(t);
    if (m.case_index < 0 || x > m.worst) {
      m.worst = x;
      m.case_index = r.index;
      m.description = describe(r.c);
      m.where = where_of(t);
    }
  }
  if (!r.v.failed()) return;
  bool added = false;
  Bucket& b = bucket_row(r.v.bucket, added);
  if (added) {
    b.first_case = r.index;
    b.repro = r.repro;
    b.repro_here = r.repro_here.empty() ? r.repro : r.repro_here;
    b.stage = r.v.stage_name();
    b.tensor = r.v.tensor;
    b.failure_class = name(r.v.failure);
  }
  ++b.count;
  const std::vector<std::string> tags = feature_tags(r.c);
  if (tags.empty()) ++b.tags["plain"];
  for (auto& tag : tags) ++b.tags[tag];
  if (r.shrunk && b.shrunk_file.empty()) {
    b.shrunk_file = r.shrunk->file;
    b.shrunk_here = r.shrunk->file_here.empty() ? r.shrunk->file : r.shrunk->file_here;
  }
}

RunTally RunTally::of(const std::vector<CaseRecord>& records) {
  RunTally t;
  for (auto& r : records) t.add(r);
  return t;
}

RunTally::Margin& RunTally::margin_row(const std::string& stage, const std::string& tensor) {
  auto m = std::find_if(margins.begin(), margins.end(), [&](auto& e) { return e.tensor == tensor && e.stage == stage; });
  if (m != margins.end()) return *m;
  margins.push_back(Margin{stage, tensor, "", "", -1, -1});
  return margins.back();
}

RunTally::Bucket& RunTally::bucket_row(const std::string& bucket, bool& added) {
  auto it = std::find_if(index_.begin(), index_.end(), [&](auto& e) { return e.first == bucket; });
  added = it == index_.end();
  if (!added) return buckets[it->second];
  index_.emplace_back(bucket, buckets.size());
  Bucket b;
  b.bucket = bucket;
  buckets.push_back(std::move(b));
  return buckets.back();
}

void RunTally::merge(const RunTally& o) {
  cases += o.cases;
  passed += o.passed;
  failed += o.failed;
  not_run += o.not_run;
  cannot_run += o.cannot_run;
  unfinished += o.unfinished;
  not_checked_tensors += o.not_checked_tensors;
  not_checked_cases += o.not_checked_cases;
  case_seconds += o.case_seconds;
  generate_s += o.generate_s, backend_s += o.backend_s, oracle_s += o.oracle_s, compare_s += o.compare_s;
  merge_agreement(oracle_agreement, o.oracle_agreement);
  if (o.oracle_disagreements && (oracle_disagreements == 0 || o.first_disagreement < first_disagreement))
    first_disagreement = o.first_disagreement;
  oracle_disagreements += o.oracle_disagreements;
  coverage.merge(o.coverage);
  for (const Margin& m : o.margins) add_margin(m);
  for (const Bucket& b : o.buckets) add_bucket(b);
}

void RunTally::add_margin(const Margin& x) {
  if (x.case_index < 0) return;
  Margin& m = margin_row(x.stage, x.tensor);
  // add() keeps the first case that reaches the worst: on a tie, the lower case index.
  if (m.case_index < 0 || x.worst > m.worst || (x.worst == m.worst && x.case_index < m.case_index)) m = x;
}

void RunTally::add_bucket(const Bucket& x) {
  bool added = false;
  Bucket& b = bucket_row(x.bucket, added);
  if (added) {
    b = x;
  } else {
    // The earlier first case gives the row (its repro, stage, tensor and class), as add() would.
    const Bucket& first = x.first_case < b.first_case ? x : b;
    const Bucket& second = &first == &x ? b : x;
    Bucket m = first;
    m.count = b.count + x.count;
    for (auto& [tag, n] : second.tags) m.tags[tag] += n;
    if (m.shrunk_file.empty()) {  // the shrunk file of the earliest side that has one
      m.shrunk_file = second.shrunk_file;
      m.shrunk_here = second.shrunk_here;
    }
    b = std::move(m);
  }
  // In order of first appearance (first case), as add() keeps them.
  std::stable_sort(buckets.begin(), buckets.end(), [](const Bucket& p, const Bucket& q) { return p.first_case < q.first_case; });
  index_.clear();
  for (size_t i = 0; i < buckets.size(); ++i) index_.emplace_back(buckets[i].bucket, i);
}

json context_json(const RunContext& ctx) {
  json context = ctx.environment.is_null() ? environment_json() : ctx.environment;
  context["tool"] = "dsa-parity";
  context["command"] = ctx.command;
  context["arguments"] = ctx.arguments;
  context["backend"] = ctx.backend;
  context["oracle"] = ctx.oracle;
  context["profile"] = ctx.profile;
  context["master_seed"] = std::to_string(ctx.master_seed);
  context["paths"] = paths_json(ctx.paths);
  context["not_selected"] = ctx.not_selected;
  context["started"] = ctx.started;
  context["seconds"] = ctx.seconds;
  context["interrupted"] = ctx.interrupted;
  context["repeat"] = ctx.repeat;
  context["backend_ahead"] = ctx.backend_ahead;
  // Only a sharded run says so: --shard 0/1 writes what a run without the flag writes.
  if (ctx.shard.sharded()) context["shard"] = {{"index", ctx.shard.index}, {"count", ctx.shard.count}};
  if (!ctx.merged.is_null()) context["merged"] = ctx.merged;
  context["comm"] = ctx.comm;
  context["world_size"] = ctx.world_size;
  if (!ctx.rank_devices.empty()) context["rank_devices"] = ctx.rank_devices;
  return context;
}

json summary_json(const RunContext& ctx, const RunTally& t) {
  json bucket_list = json::array();
  for (auto& b : t.buckets)
    bucket_list.push_back({{"bucket", b.bucket},
                           {"count", b.count},
                           {"first_case", b.first_case},
                           {"repro", b.repro},
                           {"stage", b.stage},
                           {"tensor", b.tensor},
                           {"class", b.failure_class},
                           {"shrunk_file", b.shrunk_file.empty() ? json(nullptr) : json(b.shrunk_file)},
                           {"tags", b.tags}});
  json margins = json::array();
  for (auto& m : t.margins)
    margins.push_back({{"tensor", m.tensor},
                       {"stage", m.stage},
                       {"worst_margin", num(m.worst)},
                       {"case", m.case_index},
                       {"description", m.description},
                       {"where", m.where}});
  return {{"cases", t.cases},
          {"passed", t.passed},
          {"failed", t.failed},
          {"not_run", t.not_run},
          {"cannot_run", t.cannot_run},
          {"unfinished", t.unfinished},
          {"not_checked_tensors", t.not_checked_tensors},
          {"not_checked_cases", t.not_checked_cases},
          {"exit_code", ctx.exit_code},
          {"maxfail_reached", ctx.maxfail_reached},
          {"buckets", bucket_list},
          {"margins", margins},
          {"timings", {{"generate_s", t.generate_s}, {"backend_s", t.backend_s}, {"oracle_s", t.oracle_s},
                       {"compare_s", t.compare_s}}},
          {"oracle_agreement", {{"rows", agreement_json(t.oracle_agreement)},
                                {"disagreeing_cases", t.oracle_disagreements},
                                {"first_case", t.oracle_disagreements ? json(t.first_disagreement) : json(nullptr)}}},
          {"coverage", to_json(t.coverage)},
          {"rank_failure", ctx.rank_failure ? json{{"rank", ctx.rank_failure->rank},
                                                   {"how", ctx.rank_failure->how},
                                                   {"message", ctx.rank_failure->message}}
                                            : json(nullptr)}};
}

json report_json(const RunContext& ctx, const std::vector<CaseRecord>& records) {
  json cases = json::array();
  WorstPassing worst(ctx.keep_worst);
  for (auto& r : records) {
    cases.push_back(report_record_json(r));
    worst.add(r);
  }
  return {{"schema", kReportSchema},
          {"context", context_json(ctx)},
          {"cases", cases},
          {"worst_passing", worst.sorted()},
          {"summary", summary_json(ctx, RunTally::of(records))}};
}

namespace {

std::string number_text(double x) {
  std::ostringstream o;
  o << x;
  return o.str();
}

// The attributes of <testsuites> and <testsuite> (after the name) and the suite's properties.
std::string junit_suites_attributes(const RunTally& t) {
  return " tests=\"" + std::to_string(t.cases) + "\" failures=\"" + std::to_string(t.failed) + "\" skipped=\"" +
         std::to_string(t.not_run + t.cannot_run) + "\" time=\"" + number_text(t.case_seconds) + "\"";
}

std::string junit_suite_attributes(const RunTally& t) {
  return " tests=\"" + std::to_string(t.cases) + "\" failures=\"" + std::to_string(t.failed) +
         "\" errors=\"0\" skipped=\"" + std::to_string(t.not_run + t.cannot_run) + "\" time=\"" +
         number_text(t.case_seconds) + "\"";
}

std::string junit_properties(const RunContext& ctx, const RunTally& t) {
  std::string o;
  auto prop = [&](const char* n, const std::string& v) {
    o += "\n      <property name=\"" + std::string(n) + "\" value=\"" + xml_escape(v) + "\"/>";
  };
  prop("interrupted", ctx.interrupted ? "true" : "false");
  prop("exit_code", std::to_string(ctx.exit_code));
  prop("unfinished", std::to_string(t.unfinished));
  prop("not_checked_tensors", std::to_string(t.not_checked_tensors));
  prop("not_checked_cases", std::to_string(t.not_checked_cases));
  prop("seconds", number_text(ctx.seconds));
  // --comm mpi: the rank whose failure ended the run, short (the slot is fixed; the failing
  // testcase's message has the whole story).
  if (ctx.rank_failure) prop("rank_failure", "rank " + std::to_string(ctx.rank_failure->rank) + " " + ctx.rank_failure->how);
  return o + "\n    ";
}

std::string junit_suites_open(const RunContext& ctx, const std::string& attributes) {
  (void)ctx;
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"dsa-parity\"" + attributes + ">\n";
}

std::string junit_suite_name(const RunContext& ctx) {
  return "  <testsuite name=\"dsa-parity " + xml_escape(ctx.command) + " " + xml_escape(ctx.backend) + "\"";
}

const char* kJunitClose = "  </testsuite>\n</testsuites>\n";

}  // namespace

std::string junit_case_xml(const RunContext& ctx, const CaseRecord& r) {
  std::ostringstream o;
  const CaseVerdict& v = r.v;
  const std::string case_name = r.name.empty() ? random_case_name(r.c) : r.name;
  o << "    <testcase classname=\"dsa-parity." << xml_escape(backend_kind(ctx.backend)) << "\" name=\""
    << xml_escape(case_name) << "\" time=\"" << (v.backend_s + v.oracle_s + v.compare_s) << "\"";
  if (v.verdict == Verdict::pass) {
    o << "/>\n";
    return o.str();
  }
  o << ">\n";
  if (v.failed())
    o << "      <failure type=\"" << xml_escape(name(v.failure)) << "\" message=\"" << xml_escape(v.bucket) << "\">"
      << xml_escape(v.message + "\nrepro: " + (r.repro_here.empty() ? r.repro : r.repro_here)) << "</failure>\n";
  else
    o << "      <skipped message=\"" << xml_escape(std::string(name(v.verdict)) + ": " + v.message) << "\"/>\n";
  o << "    </testcase>\n";
  return o.str();
}

std::string junit_xml(const RunContext& ctx, const std::vector<CaseRecord>& records) {
  const RunTally t = RunTally::of(records);
  std::string o = junit_suites_open(ctx, junit_suites_attributes(t));
  o += junit_suite_name(ctx) + junit_suite_attributes(t) + " timestamp=\"" + xml_escape(ctx.started) + "\">\n";
  o += "    <properties>" + junit_properties(ctx, t) + "</properties>\n";
  for (auto& r : records) o += junit_case_xml(ctx, r);
  return o + kJunitClose;
}

std::string summary_table(const RunTally& t, double seconds, bool interrupted) {
  std::vector<const RunTally::Bucket*> sorted;
  for (auto& b : t.buckets) sorted.push_back(&b);
  std::stable_sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->count > b->count; });
  std::ostringstream o;
  if (!sorted.empty()) {
    size_t w = 6;
    for (auto* b : sorted) w = std::max(w, b->bucket.size());
    char line[64];
    o << "\n" << std::string(w, '-') << "  -----  -----\n";
    o << "bucket" << std::string(w - 6, ' ') << "  count  first\n";
    o << std::string(w, '-') << "  -----  -----\n";
    for (auto* b : sorted) {
      std::snprintf(line, sizeof line, "  %5lld  %5lld\n", (long long)b->count, (long long)b->first_case);
      o << b->bucket << std::string(w - b->bucket.size(), ' ') << line;
      o << "    repro: " << (b->repro_here.empty() ? b->repro : b->repro_here) << "\n";
      if (!b->shrunk_file.empty()) o << "    shrunk: " << (b->shrunk_here.empty() ? b->shrunk_file : b->shrunk_here) << "\n";
      std::string tags;
      for (auto& [tag, n] : b->tags) tags += (tags.empty() ? "" : " ") + tag + ":" + std::to_string(n);
      if (!tags.empty()) o << "    tags: " << tags << "\n";
    }
  }
  char tail[400];
  std::snprintf(tail, sizeof tail, "\n%lld cases: %lld passed, %lld failed, %lld not run, %lld cannot run", (long long)t.cases,
                (long long)t.passed, (long long)t.failed, (long long)t.not_run, (long long)t.cannot_run);
  o << tail;
  if (t.unfinished) o << " (" << t.unfinished << " unfinished at the time limit)";
  if (t.not_checked_tensors) {
    std::snprintf(tail, sizeof tail, "; %lld tensors not checked in %lld case%s", (long long)t.not_checked_tensors,
                  (long long)t.not_checked_cases, t.not_checked_cases == 1 ? "" : "s");
    o << tail;
  }
  std::snprintf(tail, sizeof tail, " (%.1f s)%s\n", seconds, interrupted ? ", interrupted" : "");
  o << tail;
  return o.str();
}

std::string summary_table(const std::vector<CaseRecord>& records, double seconds) {
  return summary_table(RunTally::of(records), seconds);
}

std::string checks_table(const CaseVerdict& v) {
  std::ostringstream o;
  char line[400];
  std::snprintf(line, sizeof line, "%-19s %-8s %-12s %-19s %10s %10s %9s %10s %9s %10s  %s\n", "stage", "tensor",
                "status", "class", "e_f", "e_l", "e_f/e_l", "max_rel", "cosine", "rmse", "worst (g rank seq pos head dim)");
  o << line;
  for (auto& t : v.checks) {
    std::string where;
    if (t.worst) {
      const Location& w = *t.worst;
      where = std::to_string(w.g) + " " + std::to_string(w.rank) + " " + std::to_string(w.sequence) + " " +
              std::to_string(w.position) + " " + std::to_string(w.head) + " " + std::to_string(w.dim);
    }
    std::snprintf(line, sizeof line, "%-19s %-8s %-12s %-19s %10.3g %10.3g %9.3g %10.3g %9.6f %10.3g  %s\n",
                  name(t.stage), t.tensor.c_str(), name(t.status), t.failure == Failure::none ? "-" : name(t.failure),
                  t.e_f, t.e_l, t.ratio, t.max_rel, t.cosine, t.rmse, where.c_str());
    o << line;
    if (t.status != CheckStatus::pass && !t.detail.empty()) o << "    " << t.detail << "\n";
  }
  return o.str();
}

std::string shell_quote(const std::string& s) {
  bool plain = !s.empty();
  for (char ch : s)
    plain = plain && (std::isalnum(static_cast<unsigned char>(ch)) || std::string("/._-:+=,@").find(ch) != std::string::npos);
  if (plain) return s;
  std::string o = "'";
  for (char ch : s) o += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return o + "'";
}

std::string repro_command(const std::string& case_file, const std::string& backend) {
  return "dsa-parity repro " + shell_quote(case_file) + " --backend " + shell_quote(backend);
}

std::string repro_line(const ReproSpec& spec, const std::string& case_file) {
  std::string o;
  for (auto& [k, v] : spec.env) o += k + "=" + shell_quote(v) + " ";
  if (!spec.launcher.empty()) o += spec.launcher + " ";
  o += shell_quote(spec.binary) + " repro " + shell_quote(case_file);
  for (auto& opt : spec.options) o += " " + shell_quote(opt);
  return o;
}

std::vector<std::pair<std::string, std::string>> repro_environment() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (kv.rfind("DSA_", 0) != 0 || eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq);
    if (k == "DSA_GIT_SHA") continue;  // names the build, changes no verdict
    env.emplace_back(k, kv.substr(eq + 1));
  }
  std::sort(env.begin(), env.end());
  return env;
}

namespace {
std::string& invoked() {
  static std::string b = "dsa-parity";
  return b;
}
}  // namespace

void set_invoked_binary(const std::string& argv0) {
  if (argv0.empty()) return;
  std::error_code ec;
  invoked() = argv0.find('/') == std::string::npos ? argv0
                                                   : std::filesystem::absolute(argv0, ec).lexically_normal().string();
  if (ec) invoked() = argv0;
}

const std::string& invoked_binary() { return invoked(); }

std::string relative_to(const std::string& path, const std::string& folder) {
  namespace fs = std::filesystem;
  if (folder.empty() || path.empty()) return path;
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec).lexically_normal();
  const fs::path base = fs::absolute(folder, ec).lexically_normal();
  const fs::path rel = abs.lexically_relative(base);
  return rel.empty() ? path : rel.generic_string();
}

std::string report_path(const std::string& path, const std::string& report_folder, const std::string& corpus_root) {
  namespace fs = std::filesystem;
  const std::string rel = relative_to(path, report_folder);
  if (corpus_root.empty() || report_folder.empty() || fs::path(rel).is_absolute()) return rel;
  std::error_code ec;
  const fs::path base = fs::absolute(report_folder, ec).lexically_normal().relative_path(), up(rel);
  const auto climbs = std::count(up.begin(), up.end(), fs::path(".."));
  const auto depth = std::distance(base.begin(), base.end()) - (base.filename().empty() ? 1 : 0);  // "a/b/" ends in ""
  if (depth == 0 || climbs < depth) return rel;  // the report folder and the file share a folder below the root
  const fs::path in_corpus = fs::absolute(path, ec).lexically_normal().lexically_relative(
      fs::absolute(corpus_root, ec).lexically_normal());
  if (in_corpus.empty() || *in_corpus.begin() == "..") return rel;  // not a corpus file
  return "corpus " + in_corpus.generic_string();
}

bool is_corpus_relative(const std::string& path) { return path.rfind("corpus ", 0) == 0; }

std::string margin_table(const RunTally& t) {
  if (t.margins.empty()) return "";
  size_t w = 6;
  for (auto& m : t.margins) w = std::max(w, m.tensor.size());
  std::ostringstream o;
  char line[512];
  o << "\nworst margin e_f/(alpha*e_l+floor) per tensor (<= 1 passes):\n";
  std::snprintf(line, sizeof line, "  %-18s %-*s %10s %6s  %s\n", "stage", (int)w, "tensor", "margin", "case", "where");
  o << line;
  for (auto& m : t.margins) {
    std::snprintf(line, sizeof line, "  %-18s %-*s %10.3g %6lld  %s\n", m.stage.c_str(), (int)w, m.tensor.c_str(),
                  m.worst, (long long)m.case_index, m.where.c_str());
    o << line;
  }
  return o.str();
}

std::string agreement_table(const RunTally& t) {
  if (t.oracle_agreement.empty()) return "";
  size_t w = 6;
  for (auto& a : t.oracle_agreement) w = std::max(w, a.tensor.size());
  std::ostringstream o;
  char line[768];
  std::snprintf(line, sizeof line,
                "\noracle agreement (--oracle both; exact_rel <= %g, lowp_ratio <= %g), %lld disagreeing cases%s:\n",
                kOracleExactRel, kOracleLowpFactor, (long long)t.oracle_disagreements,
                t.oracle_disagreements ? (", first case " + std::to_string(t.first_disagreement)).c_str() : "");
  o << line;
  std::snprintf(line, sizeof line, "  %-*s %10s %10s %10s %10s  %s\n", (int)w, "tensor", "exact_rel", "lowp_ratio",
                "e_l cpu", "e_l gpu", "");
  o << line;
  for (auto& a : t.oracle_agreement) {
    std::snprintf(line, sizeof line, "  %-*s %10.3g %10.3g %10.3g %10.3g  %s\n", (int)w, a.tensor.c_str(), a.exact_rel,
                  a.lowp_ratio, a.e_l_a, a.e_l_b, a.agrees() ? "ok" : ("DISAGREES: " + a.detail).c_str());
    o << line;
  }
  return o.str();
}

std::string timing_line(const RunTally& t, std::optional<double> overlapped_wall_s) {
  const double all = t.generate_s + t.backend_s + t.oracle_s + t.compare_s;
  if (t.cases == 0 || all <= 0) return "";
  char line[480];
  auto pct = [&](double x) { return 100.0 * x / all; };
  std::snprintf(line, sizeof line,
                "case time %.3g s (%.3g s per case): generate %.3g s (%.0f%%), backend %.3g s (%.0f%%), oracle %.3g s "
                "(%.0f%%), compare %.3g s (%.0f%%)\n",
                all, all / double(t.cases), t.generate_s, pct(t.generate_s), t.backend_s, pct(t.backend_s), t.oracle_s,
                pct(t.oracle_s), t.compare_s, pct(t.compare_s));
  std::string out = line;
  if (overlapped_wall_s) {
    std::snprintf(line, sizeof line,
                  "  (the parts overlap: each next case's backend ran while the case before it was judged; "
                  "wall %.3g s, %.3g s per case)\n",
                  *overlapped_wall_s, *overlapped_wall_s / double(t.cases));
    out += line;
  }
  return out;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) throw InvalidInput(path, "cannot write this file");
}

void check_output_file(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  require(!path.empty(), flag, "needs a file name");
  require(!fs::is_directory(p, ec), flag, "'" + path + "' is a directory, not a file");
  if (p.has_parent_path()) {
    fs::create_directories(p.parent_path(), ec);
    require(!ec && fs::is_directory(p.parent_path(), ec), flag,
            "cannot create the folder '" + p.parent_path().string() + "' of '" + path + "'");
  }
  // Writable: a file can be made beside it (where the streamed file goes) and it can be replaced.
  const std::string probe = path + ".probe-" + std::to_string(getpid());
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  require(fd >= 0, flag, "cannot write '" + path + "': " + std::strerror(errno));
  close(fd);
  unlink(probe.c_str());
}

StreamedFile::StreamedFile(const std::string& path, const std::string& flag)
    : path_(path), partial_(path + ".partial-" + std::to_string(getpid())), flag_(flag) {
  check_output_file(path, flag);
  f_ = std::fopen(partial_.c_str(), "wb");
  require(f_ != nullptr, flag, "cannot write '" + partial_ + "': " + std::strerror(errno));
}

StreamedFile::~StreamedFile() {
  if (!f_) return;
  std::fclose(f_);
  unlink(partial_.c_str());
}

void StreamedFile::write(const std::string& text) {
  if (!f_) return;
  if (std::fwrite(text.data(), 1, text.size(), f_) != text.size() || std::fflush(f_) != 0)
    throw InvalidInput(flag_, "cannot write '" + partial_ + "': " + std::strerror(errno));
  offset_ += static_cast<int64_t>(text.size());
}

void StreamedFile::patch(int64_t at, const std::string& text) {
  if (!f_ || at < 0) return;
  std::fflush(f_);
  if (pwrite(fileno(f_), text.data(), text.size(), at) != static_cast<ssize_t>(text.size()))
    throw InvalidInput(flag_, "cannot write '" + partial_ + "': " + std::strerror(errno));
}

void StreamedFile::finish() {
  if (!f_) return;
  const bool ok = std::fflush(f_) == 0 && fsync(fileno(f_)) == 0;
  std::fclose(f_);
  f_ = nullptr;
  if (!ok || std::rename(partial_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    unlink(partial_.c_str());
    throw InvalidInput(flag_, "cannot write '" + path_ + "': " + why);
  }
}

namespace {

// Placeholders of the streamed header, replaced by blank slots of a fixed width.
constexpr const char* kSecondsMark = "@@dsa-parity-seconds@@";
constexpr const char* kInterruptedMark = "@@dsa-parity-interrupted@@";
constexpr size_t kSecondsSlot = 24, kInterruptedSlot = 5, kAttributeSlot = 160, kPropertiesSlot = 640;

std::string padded(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

// Replaces the quoted mark in text by value padded to width; returns its position.
int64_t place(std::string& text, const char* mark, const std::string& value, size_t width) {
  const std::string quoted = std::string("\"") + mark + "\"";
  const size_t at = text.find(quoted);
  if (at == std::string::npos) return -1;
  text.replace(at, quoted.size(), padded(value, width));
  return static_cast<int64_t>(at);
}

std::string seconds_text(double s) {
  char b[40];
  std::snprintf(b, sizeof b, "%.6f", std::isfinite(s) && s >= 0 && s < 1e15 ? s : 0.0);
  return b;
}

std::string dump(const json& j, int indent) {
  // Invalid UTF-8 that reached the report anyway (a path) is written as U+FFFD, never a throw.
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

}  // namespace

ReportStream::ReportStream(const std::string& path, const RunContext& ctx, bool indent)
    : file_(path, "--report"), indent_(indent ? 1 : -1), worst_(ctx.keep_worst) {
  json context = context_json(ctx);
  context["seconds"] = kSecondsMark;
  context["interrupted"] = kInterruptedMark;
  std::string head = "{\"schema\": \"" + std::string(kReportSchema) + "\",\n\"context\": " + dump(context, indent_);
  const int64_t base = file_.offset();
  int64_t s = place(head, kSecondsMark, "0", kSecondsSlot);
  const int64_t i = place(head, kInterruptedMark, "false", kInterruptedSlot);
  // The second replacement moved what follows it.
  if (i >= 0 && i < s) s += static_cast<int64_t>(kInterruptedSlot) - static_cast<int64_t>(std::strlen(kInterruptedMark) + 2);
  seconds_at_ = s < 0 ? -1 : base + s;
  interrupted_at_ = i < 0 ? -1 : base + i;
  file_.write(head + ",\n\"cases\": [");
}

void ReportStream::add(const CaseRecord& r) {
  add_record(report_record_json(r));
  worst_.add(r);
}

void ReportStream::add_record(const json& record) {
  file_.write((first_ ? "\n" : ",\n") + dump(record, indent_));
  first_ = false;
}

void ReportStream::offer_worst(double margin, int64_t index, const json& full_record) {
  worst_.add(margin, index, full_record);
}

void ReportStream::finish(const RunContext& ctx, const RunTally& t) {
  file_.write("\n],\n\"worst_passing\": " + dump(worst_.sorted(), indent_) + ",\n\"summary\": " +
              dump(summary_json(ctx, t), indent_) + "}\n");
  file_.patch(seconds_at_, padded(seconds_text(ctx.seconds), kSecondsSlot));
  file_.patch(interrupted_at_, padded(ctx.interrupted ? "true" : "false", kInterruptedSlot));
  file_.finish();
}

JunitStream::JunitStream(const std::string& path, const RunContext& ctx) : file_(path, "--junit") {
  std::string head = junit_suites_open(ctx, "");
  suites_at_ = static_cast<int64_t>(head.size()) - 2;  // before ">\n"
  head.insert(head.size() - 2, std::string(kAttributeSlot, ' '));
  head += junit_suite_name(ctx);
  suite_at_ = static_cast<int64_t>(head.size());
  head += std::string(kAttributeSlot, ' ') + " timestamp=\"" + xml_escape(ctx.started) + "\">\n    <properties>";
  properties_at_ = static_cast<int64_t>(head.size());
  head += std::string(kPropertiesSlot, ' ') + "</properties>\n";
  file_.write(head);
}

void JunitStream::add(const RunContext& ctx, const CaseRecord& r) { file_.write(junit_case_xml(ctx, r)); }

void JunitStream::finish(const RunContext& ctx, const RunTally& t) {
  file_.write(kJunitClose);
  auto fit = [](std::string s, size_t width) { return s.size() > width ? std::string(width, ' ') : padded(s, width); };
  file_.patch(suites_at_, fit(junit_suites_attributes(t), kAttributeSlot));
  file_.patch(suite_at_, fit(junit_suite_attributes(t), kAttributeSlot));
  file_.patch(properties_at_, fit(junit_properties(ctx, t), kPropertiesSlot));
  file_.finish();
}

Progress::Progress(bool enabled, std::optional<int64_t> total, std::optional<double> budget_s, double every_s)
    : enabled_(enabled), tty_(isatty(2) != 0), every_(every_s), total_(total), budget_(budget_s),
      start_(std::chrono::steady_clock::now()) {
  if (!tty_ && every_ <= 0) enabled_ = false;
}

void Progress::update(int64_t done, int64_t failures, int64_t passed) {
  if (!enabled_) return;
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = t > 0 ? done / t : 0;
  double eta = -1;
  if (total_ && rate > 0) eta = (*total_ - done) / rate;
  if (budget_) eta = std::max(0.0, *budget_ - t);
  char line[200];
  if (!tty_) {  // a log: one line every every_ seconds
    if (t - last_ < every_) return;
    last_ = t;
    std::string of = total_ ? "/" + std::to_string(*total_) : "";
    std::string eta_text = eta >= 0 ? ", ETA " + std::to_string(static_cast<long long>(std::lround(eta))) + " s" : "";
    std::snprintf(line, sizeof line, "progress: %lld%s cases, %lld passed, %lld failed, %.1f cases/s%s\n",
                  (long long)done, of.c_str(), (long long)(passed >= 0 ? passed : done - failures), (long long)failures, rate,
                  eta_text.c_str());
    std::fputs(line, stderr);
    std::fflush(stderr);
    return;
  }
  if (drawn_ && t - last_ < 0.2 && !(total_ && done >= *total_)) return;  // at most 5 redraws a second
  last_ = t;
  std::string of = total_ ? "/" + std::to_string(*total_) : "";
  if (eta >= 0)
    std::snprintf(line, sizeof line, "\r[%lld%s] %lld failures  %.1f cases/s  ETA %.0f s   ", (long long)done,
                  of.c_str(), (long long)failures, rate, eta);
  else
    std::snprintf(line, sizeof line, "\r[%lld%s] %lld failures  %.1f cases/s   ", (long long)done, of.c_str(),
                  (long long)failures, rate);
  std::fputs(line, stderr);
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::finish() {
  if (enabled_ && tty_ && drawn_) std::fputs("\n", stderr);
  drawn_ = false;
}

}  // namespace dsa
