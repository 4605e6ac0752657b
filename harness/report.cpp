#include "harness/report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "harness/backend.hpp"
#include "core/errors.hpp"
#include "harness/text.hpp"

#ifdef DSA_HAVE_CUDA
#include "fused/device.hpp"
#endif

namespace dsa {

using nlohmann::json;

namespace {

// JSON has no infinities or NaN: they are written as null (the schema allows it).
json num(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string command_output(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  return trim(out);
}

// The MLA paths random cases were drawn from, by name; null when the run drew no random case
// (replay, repro), where an empty list would read as "no path allowed".
json paths_json(const std::vector<Path>& paths) {
  if (paths.empty()) return nullptr;
  json a = json::array();
  for (Path p : paths) a.push_back(name(p));
  return a;
}

// Backend messages and paths come from outside: made valid UTF-8 first (text::safe), then escaped.
std::string xml_escape(const std::string& raw) {
  const std::string s = text::safe(raw);
  std::string o;
  for (char ch : s) switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        // XML 1.0 forbids most control characters.
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t') o += ' ';
        else o += ch;
    }
  return o;
}

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
  // DSA_GIT_SHA names the commit where the tree travels without its .git (a device machine).
  const char* given = std::getenv("DSA_GIT_SHA");
  std::string sha = given ? given : command_output("git -C '" DSA_SOURCE_DIR "' rev-parse HEAD 2>/dev/null");
  const bool is_sha = sha.size() == 40 && sha.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!given && is_sha &&
      !command_output("git -C '" DSA_SOURCE_DIR "' status --porcelain --untracked-files=no 2>/dev/null").empty())
    sha += "-dirty";
  e["git_sha"] = given || is_sha ? sha : "unknown";
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  e["host"] = host;
#ifdef DSA_HAVE_CUDA
  e["cuda"] = "built";
  const int n = fused::device_count();
  e["gpu"] = n > 0 ? fused::device_name(0) + (n > 1 ? " x" + std::to_string(n) : std::string()) : "none";
#ifdef DSA_HAVE_NCCL
  e["nccl"] = "built";
#else
  e["nccl"] = "not built";
#endif
#else
  e["cuda"] = "not built";
  e["gpu"] = "none";
  e["nccl"] = "not built";
#endif
  return e;
}

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
            {"case", to_json(r.c)},
            {"verdict", name(v.verdict)},
            {"bucket", v.bucket.empty() ? json(nullptr) : json(v.bucket)},
            {"message", text::safe(v.message, 16000)},  // a backend's words: valid UTF-8, capped
            {"tensors", tensors},
            {"not_checked", not_checked},
            {"timings", {{"backend_s", v.backend_s}, {"oracle_s", v.oracle_s}, {"compare_s", v.compare_s}}},
            {"repro", r.repro.empty() ? json(nullptr) : json(r.repro)},
            {"case_file", r.case_file.empty() ? json(nullptr) : json(r.case_file)}};
  j["failure"] = v.failed() ? json{{"stage", v.stage_name()}, {"tensor", v.tensor}, {"class", name(v.failure)}} : json(nullptr);
  if (r.shrunk) {
    const ShrinkRecord& s = *r.shrunk;
    j["shrunk"] = {{"case", to_json(s.shrunk)}, {"description", describe(s.shrunk)}, {"bucket", s.bucket},
                   {"file", s.file},            {"runs", s.runs},                    {"seconds", s.seconds},
                   {"tp", s.tp}};
  } else {
    j["shrunk"] = nullptr;
  }
  return j;
}

json report_json(const RunContext& ctx, const std::vector<CaseRecord>& records) {
  json context = environment_json();
  context["tool"] = "dsa-parity";
  context["command"] = ctx.command;
  context["arguments"] = ctx.arguments;
  context["backend"] = ctx.backend;
  context["oracle"] = ctx.oracle;
  context["profile"] = ctx.profile;
  context["master_seed"] = ctx.master_seed;
  context["paths"] = paths_json(ctx.paths);
  context["not_selected"] = ctx.not_selected;
  context["started"] = ctx.started;
  context["seconds"] = ctx.seconds;

  json cases = json::array();
  std::map<std::string, int64_t> verdicts = {{"pass", 0}, {"fail", 0}, {"not-run", 0}, {"cannot-run", 0}};
  std::map<std::string, json> buckets;
  std::vector<std::string> order;
  for (auto& r : records) {
    cases.push_back(record_json(r));
    ++verdicts[name(r.v.verdict)];
    if (!r.v.failed()) continue;
    auto it = buckets.find(r.v.bucket);
    if (it == buckets.end()) {
      order.push_back(r.v.bucket);
      buckets[r.v.bucket] = {{"bucket", r.v.bucket}, {"count", 0},         {"first_case", r.index},
                             {"repro", r.repro},     {"stage", r.v.stage_name()}, {"tensor", r.v.tensor},
                             {"class", name(r.v.failure)}, {"shrunk_file", nullptr}};
    }
    json& b = buckets[r.v.bucket];
    b["count"] = b["count"].get<int64_t>() + 1;
    if (r.shrunk && b["shrunk_file"].is_null()) b["shrunk_file"] = r.shrunk->file;
  }
  json bucket_list = json::array();
  for (auto& name : order) bucket_list.push_back(buckets[name]);
  json summary = {{"cases", static_cast<int64_t>(records.size())},
                  {"passed", verdicts["pass"]},
                  {"failed", verdicts["fail"]},
                  {"not_run", verdicts["not-run"]},
                  {"cannot_run", verdicts["cannot-run"]},
                  {"exit_code", ctx.exit_code},
                  {"buckets", bucket_list}};
  return {{"schema", kReportSchema}, {"context", context}, {"cases", cases}, {"summary", summary}};
}

std::string junit_xml(const RunContext& ctx, const std::vector<CaseRecord>& records) {
  int64_t failures = 0, skipped = 0;
  double total = 0;
  for (auto& r : records) {
    failures += r.v.failed();
    skipped += r.v.verdict == Verdict::not_run || r.v.verdict == Verdict::cannot_run;
    total += r.v.backend_s + r.v.oracle_s + r.v.compare_s;
  }
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<testsuites name=\"dsa-parity\" tests=\"" << records.size() << "\" failures=\"" << failures
    << "\" skipped=\"" << skipped << "\" time=\"" << total << "\">\n";
  o << "  <testsuite name=\"dsa-parity " << xml_escape(ctx.command) << " " << xml_escape(ctx.backend)
    << "\" tests=\"" << records.size() << "\" failures=\"" << failures << "\" errors=\"0\" skipped=\"" << skipped
    << "\" time=\"" << total << "\" timestamp=\"" << xml_escape(ctx.started) << "\">\n";
  for (auto& r : records) {
    const CaseVerdict& v = r.v;
    o << "    <testcase classname=\"dsa-parity." << xml_escape(ctx.backend) << "\" name=\"" << r.index << " "
      << xml_escape(describe(r.c)) << "\" time=\"" << (v.backend_s + v.oracle_s + v.compare_s) << "\"";
    if (v.verdict == Verdict::pass) {
      o << "/>\n";
      continue;
    }
    o << ">\n";
    if (v.failed())
      o << "      <failure type=\"" << xml_escape(name(v.failure)) << "\" message=\"" << xml_escape(v.bucket) << "\">"
        << xml_escape(v.message + "\nrepro: " + r.repro) << "</failure>\n";
    else
      o << "      <skipped message=\"" << xml_escape(std::string(name(v.verdict)) + ": " + v.message) << "\"/>\n";
    o << "    </testcase>\n";
  }
  o << "  </testsuite>\n</testsuites>\n";
  return o.str();
}

std::string summary_table(const std::vector<CaseRecord>& records, double seconds) {
  struct Row {
    int64_t count = 0, first = 0;
    std::string repro, shrunk;
  };
  std::map<std::string, Row> rows;
  std::map<std::string, int64_t> verdicts;
  for (auto& r : records) {
    ++verdicts[name(r.v.verdict)];
    if (!r.v.failed()) continue;
    Row& row = rows[r.v.bucket];
    if (row.count++ == 0) {
      row.first = r.index;
      row.repro = r.repro;
    }
    if (r.shrunk && row.shrunk.empty()) row.shrunk = r.shrunk->file;
  }
  std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.second.count > b.second.count; });
  std::ostringstream o;
  if (!sorted.empty()) {
    size_t w = 6;
    for (auto& [b, _] : sorted) w = std::max(w, b.size());
    char line[64];
    o << "\n" << std::string(w, '-') << "  -----  -----\n";
    o << "bucket" << std::string(w - 6, ' ') << "  count  first\n";
    o << std::string(w, '-') << "  -----  -----\n";
    for (auto& [b, row] : sorted) {
      std::snprintf(line, sizeof line, "  %5lld  %5lld\n", (long long)row.count, (long long)row.first);
      o << b << std::string(w - b.size(), ' ') << line;
      o << "    repro: " << row.repro << "\n";
      if (!row.shrunk.empty()) o << "    shrunk: " << row.shrunk << "\n";
    }
  }
  char tail[200];
  std::snprintf(tail, sizeof tail, "\n%zu cases: %lld passed, %lld failed, %lld not run, %lld cannot run (%.1f s)\n",
                records.size(), (long long)verdicts["pass"], (long long)verdicts["fail"],
                (long long)verdicts["not-run"], (long long)verdicts["cannot-run"], seconds);
  o << tail;
  return o.str();
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

void write_text_file(const std::string& path, const std::string& text) {
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) throw InvalidInput(path, "cannot write this file");
}

Progress::Progress(bool enabled, std::optional<int64_t> total, std::optional<double> budget_s)
    : enabled_(enabled && isatty(2)), total_(total), budget_(budget_s), start_(std::chrono::steady_clock::now()) {}

void Progress::update(int64_t done, int64_t failures) {
  if (!enabled_) return;
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (drawn_ && t - last_ < 0.2 && !(total_ && done >= *total_)) return;  // at most 5 redraws a second
  last_ = t;
  const double rate = t > 0 ? done / t : 0;
  double eta = -1;
  if (total_ && rate > 0) eta = (*total_ - done) / rate;
  if (budget_) eta = std::max(0.0, *budget_ - t);
  char line[160];
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
  if (enabled_ && drawn_) std::fputs("\n", stderr);
  drawn_ = false;
}

}  // namespace dsa
