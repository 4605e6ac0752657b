#include "harness/report_merge.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "harness/report.hpp"
#include "harness/report_read.hpp"
#include "harness/run_finish.hpp"

namespace dsa {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// One shard's report, read and checked.
struct Input {
  std::string path;
  fs::path dir;  // its folder: the paths it holds are relative to it
  json report;
  RunContext ctx;
  Shard shard;
};

// The context fields that make reports shards of one run; the first input is the reference.
constexpr const char* kSameRun[] = {"command", "master_seed", "profile", "backend", "oracle", "paths", "git_sha", "git_dirty", "repeat"};

// fuzz names a random case's origin "random <profile> seed <S> #<i>"; any other origin is a case
// file, relative to the report's folder or "corpus <path>" (report_path).
bool is_random_origin(const std::string& origin) {
  static const std::regex random(R"(^random \S+ seed [0-9]+ #[0-9]+$)");
  return std::regex_match(origin, random);
}

// A path relative to one report's folder, made relative to the merged report's (absolute paths,
// "corpus ..." paths and paths of a report in the same folder stay as they are).
std::string rebase(const std::string& path, const fs::path& from, const fs::path& to) {
  if (path.empty() || fs::path(path).is_absolute() || is_corpus_relative(path) || from == to) return path;
  return relative_to((from / path).string(), to.string());
}

void rebase_field(json& j, const char* key, const fs::path& from, const fs::path& to) {
  if (j.contains(key) && j[key].is_string()) j[key] = rebase(j[key].get<std::string>(), from, to);
}

// A record's paths made relative to the merged report's folder: the origin of a case file, the case
// file, the case file in its repro line (written as ` repro <quoted file>`), the shrunk file.
void rebase_record(json& r, const fs::path& from, const fs::path& to) {
  if (from == to) return;
  if (r.contains("origin") && r["origin"].is_string() && !is_random_origin(r["origin"].get<std::string>()))
    rebase_field(r, "origin", from, to);
  if (r.contains("case_file") && r["case_file"].is_string()) {
    const std::string old_file = r["case_file"], new_file = rebase(old_file, from, to);
    r["case_file"] = new_file;
    if (r.contains("repro") && r["repro"].is_string()) {
      std::string line = r["repro"];
      const std::string was = " repro " + shell_quote(old_file);
      const size_t at = line.find(was);
      if (at != std::string::npos) line.replace(at, was.size(), " repro " + shell_quote(new_file));
      r["repro"] = line;
    }
  }
  if (r.contains("shrunk") && r["shrunk"].is_object()) rebase_field(r["shrunk"], "file", from, to);
}

Input read_input(const std::string& path) {
  Input in;
  in.path = path;
  in.dir = fs::absolute(path).parent_path().lexically_normal();
  in.report = read_report(path, path);
  try {
    in.ctx = context_from_json(in.report);
  } catch (const InvalidInput& e) {
    throw InvalidInput(path + ": " + e.field, e.rule);
  } catch (const json::exception& e) {
    throw InvalidInput(path + ": context", std::string("is not a dsa-parity report context: ") + e.what());
  }
  require(in.ctx.merged.is_null(), path + ": context.merged",
          "is a merged report already: merge the shard reports it came from");
  in.shard = in.ctx.shard;
  require(in.shard.count >= 1 && in.shard.index >= 0 && in.shard.index < in.shard.count, path + ": context.shard",
          "must have 0 <= index < count");
  return in;
}

// Refuses inputs that are not shards of the reference's run.
void check_same_run(const Input& in, const Input& ref) {
  const json& c = in.report["context"];
  const json& r = ref.report["context"];
  for (const char* key : kSameRun) {
    const json a = c.value(key, json()), b = r.value(key, json());
    require(a == b, in.path + ": context." + key,
            "is " + a.dump() + " but " + ref.path + " has " + b.dump() +
                ": the shards of one run share command, seed, profile, backend, oracle, paths, git sha and --repeat");
  }
  require(in.shard.count == ref.shard.count, in.path + ": context.shard",
          "is shard " + in.shard.text() + " but " + ref.path + " is shard " + ref.shard.text() +
              ": the shards of one run share their count N");
}

int exit_code_of(const RunTally& t, const std::vector<Input>& inputs, bool missing) {
  for (auto& in : inputs)
    if (in.ctx.interrupted) return in.ctx.exit_code;
  if (t.failed) return 1;
  return t.not_run + t.cannot_run || missing ? 3 : 0;
}

std::string list_text(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

}  // namespace

int merge_reports(const MergeOptions& o) {
  require(!o.inputs.empty(), "REPORT.json", "give the reports of the shards to merge");
  check_output_file(o.out, "--out");
  if (!o.junit.empty()) check_output_file(o.junit, "--junit");
  if (!o.html.empty()) check_output_file(o.html, "--html");
  require(o.keep_worst >= 0, "--keep-worst", "must be >= 0");
  for (auto& path : o.inputs) {
    std::error_code ec;
    require(!fs::equivalent(path, o.out, ec), "--out", "is " + path + ", one of the reports to merge");
  }

  // Read and check every input before anything is written.
  std::vector<Input> inputs;
  for (auto& path : o.inputs) inputs.push_back(read_input(path));
  for (auto& in : inputs) check_same_run(in, inputs.front());
  std::map<int64_t, std::string> given;  // shard index -> its report
  for (auto& in : inputs) {
    auto [at, fresh] = given.emplace(in.shard.index, in.path);
    require(fresh, in.path + ": context.shard",
            "shard " + in.shard.text() + " is also " + at->second + ": each shard is merged once");
  }
  std::stable_sort(inputs.begin(), inputs.end(), [](const Input& a, const Input& b) { return a.shard.index < b.shard.index; });
  const int64_t count = inputs.front().shard.count;
  std::vector<int64_t> present, missing;
  for (int64_t i = 0; i < count; ++i) (given.count(i) ? present : missing).push_back(i);

  const fs::path to = fs::absolute(o.out).parent_path().lexically_normal();
  // The cases of every shard, by case number (every shard numbers its cases as the unsharded run
  // does), paths made relative to the merged report's folder.
  std::map<int64_t, json> cases;
  std::map<int64_t, std::string> case_shard;  // case number -> the report it came from
  std::vector<std::pair<json, CaseRecord>> worst;
  RunTally tally;
  std::vector<std::string> not_selected;
  for (Input& in : inputs) {
    try {
      for (json& r : in.report["cases"]) {
        rebase_record(r, in.dir, to);
        CaseRecord rec = record_from_json(r);
        tally.case_seconds += rec.v.backend_s + rec.v.oracle_s + rec.v.compare_s;
        auto [at, fresh] = case_shard.emplace(rec.index, in.path);
        require(fresh, in.path + ": cases",
                "case " + std::to_string(rec.index) + " is also in " + at->second +
                    ": shards of one run hold disjoint cases (were they run on the same corpus?)");
        cases.emplace(rec.index, std::move(r));
      }
      for (json& r : in.report.value("worst_passing", json::array())) {
        rebase_record(r, in.dir, to);
        CaseRecord rec = record_from_json(r);
        worst.emplace_back(std::move(r), std::move(rec));
      }
      RunTally t = tally_from_json(in.report["summary"]);
      t.case_seconds = 0;  // counted from the records above
      for (auto& b : t.buckets) {
        // A bucket's repro line is its first case's (rebased with the record).
        auto c = cases.find(b.first_case);
        if (c != cases.end() && c->second.value("repro", json()).is_string()) b.repro = c->second["repro"];
        b.shrunk_file = rebase(b.shrunk_file, in.dir, to);
      }
      tally.merge(t);
    } catch (const InvalidInput& e) {
      throw InvalidInput(e.field.rfind(in.path, 0) == 0 ? e.field : in.path + ": " + e.field, e.rule);
    } catch (const json::exception& e) {
      throw InvalidInput(in.path, std::string("is not a dsa-parity report: ") + e.what());
    }
    for (auto& f : in.ctx.not_selected) {
      const std::string p = rebase(f, in.dir, to);
      if (std::find(not_selected.begin(), not_selected.end(), p) == not_selected.end()) not_selected.push_back(p);
    }
  }

  // The merged context: the first shard's run and environment, the shards' times and outcomes.
  RunContext ctx = inputs.front().ctx;
  ctx.arguments = o.arguments;
  ctx.shard = Shard{};
  ctx.not_selected = not_selected;
  ctx.keep_worst = o.keep_worst;
  ctx.seconds = 0;
  ctx.interrupted = ctx.maxfail_reached = false;
  json reports = json::array();
  for (auto& in : inputs) {
    ctx.started = std::min(ctx.started, in.ctx.started);
    ctx.seconds += in.ctx.seconds;
    ctx.interrupted = ctx.interrupted || in.ctx.interrupted;
    ctx.maxfail_reached = ctx.maxfail_reached || in.ctx.maxfail_reached;
    reports.push_back({{"file", relative_to(in.path, to.string())},
                       {"shard", in.shard.index},
                       {"arguments", in.ctx.arguments},
                       {"host", in.ctx.environment.value("host", "")},
                       {"started", in.ctx.started},
                       {"seconds", in.ctx.seconds},
                       {"exit_code", in.ctx.exit_code}});
  }
  ctx.merged = {{"shard_count", count}, {"shards", present}, {"missing", missing}, {"complete", missing.empty()},
                {"reports", reports}};
  ctx.exit_code = exit_code_of(tally, inputs, !missing.empty());

  // Written by the run's writers: the report streamed case by case, JUnit, HTML.
  ReportStream report(o.out, ctx, /*indent=*/cases.size() <= 1000);
  std::optional<JunitStream> junit;
  if (!o.junit.empty()) junit.emplace(o.junit, ctx);
  for (auto& [index, r] : cases) {
    report.add_record(r);
    if (junit) junit->add(ctx, record_from_json(r));
  }
  for (auto& [r, rec] : worst) report.offer_worst(record_margin(rec.v), rec.index, r);

  if (missing.empty())
    std::printf("merged %zu shard%s of %lld: the whole run\n", present.size(), present.size() == 1 ? "" : "s",
                (long long)count);
  else
    std::printf("merged %zu of %lld shards; missing shard%s %s: the report covers part of the run\n", present.size(),
                (long long)count, missing.size() == 1 ? "" : "s", list_text(missing).c_str());
  print_run_summary(ctx, tally, /*quiet=*/false);
  finish_outputs(ctx, tally, &report, junit ? &*junit : nullptr, o.html);
  return ctx.exit_code;
}

}  // namespace dsa
