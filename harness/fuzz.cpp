#include "harness/fuzz.hpp"

#include <algorithm>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>

#include "harness/bounds.hpp"
#include "harness/bucket.hpp"
#include "harness/case.hpp"
#include "harness/coverage.hpp"
#include "harness/generate.hpp"
#include "harness/interrupt.hpp"
#include "harness/report.hpp"
#include "harness/oracle_choice.hpp"
#include "harness/run_case.hpp"
#include "harness/run_finish.hpp"
#include "harness/shrink.hpp"
#include "harness/stall_watch.hpp"
#include "core/errors.hpp"
#include "core/layout.hpp"
#include "core/trace.hpp"

namespace dsa {

namespace fs = std::filesystem;

ProfileDefaults profile_defaults(const std::string& profile) {
  if (profile == "smoke") return {32, 8};
  if (profile == "default") return {300, 30};
  if (profile == "nightly") return {5000, 120};
  if (profile == "production") return {4, 300};
  std::string all;
  for (auto& p : profiles()) all += (all.empty() ? "" : "|") + p;
  throw InvalidInput("--profile", "must be one of " + all + ", got '" + profile + "'");
}

std::string default_corpus() {
  const fs::path p = fs::path(DSA_SOURCE_DIR) / "cases";
  std::error_code ec;
  return fs::is_directory(p, ec) ? p.string() : std::string();
}

std::vector<std::string> corpus_files(const std::string& dir, const std::string& field) {
  std::error_code ec;
  require(fs::exists(dir, ec), field, "'" + dir + "' does not exist");
  if (!fs::is_directory(dir, ec)) return {dir};
  std::vector<std::string> edge, regressions, rest;
  for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::recursive_directory_iterator(); ++it) {
    if (!it->is_regular_file() || it->path().extension() != ".json") continue;
    const std::string rel = fs::relative(it->path(), dir).generic_string();
    const std::string path = it->path().string();
    if (rel.rfind("malformed/", 0) == 0) continue;  // cases/malformed/: inputs that must be refused, never run
    if (rel.rfind("edge/", 0) == 0)
      edge.push_back(path);
    else if (rel.rfind("regressions/", 0) == 0)
      regressions.push_back(path);
    else
      rest.push_back(path);
  }
  std::vector<std::string> out;
  for (auto* v : {&edge, &regressions, &rest}) {
    std::sort(v->begin(), v->end());
    out.insert(out.end(), v->begin(), v->end());
  }
  return out;
}

std::string output_dir(const std::string& report) {
  if (report.empty()) return "dsa-parity-out";
  fs::path p(report);
  return (p.parent_path() / (p.stem().string() + "-cases")).string();
}

std::string run_id(uint64_t seed, const Shard& shard) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  std::string id = std::string(buf) + "-" + std::to_string(getpid()) + "-seed" + std::to_string(seed);
  if (shard.sharded()) id += "-shard" + std::to_string(shard.index) + "of" + std::to_string(shard.count);
  return id;
}

namespace {

bool is_mutant(const std::string& backend_name) { return backend_name.rfind("mutant:", 0) == 0; }

Case load_case_file(const std::string& path) {
  try {
    return load_case(path);
  } catch (const InvalidInput& e) {
    throw InvalidInput(path + ": " + e.field, e.rule);
  }
}

int64_t padded_rows(const Case& c) {
  return make_layout(c.problem.seqlens, c.problem.cp, c.problem.pad_rows).tp;
}

// Where a shrunk case goes: the corpus's regressions/ for a real backend, the output folder for a
// mutant (a planted bug is not a regression of real code).
std::string shrunk_path(const std::string& regressions_dir, const std::string& out_dir, const std::string& backend,
                        const std::string& bucket) {
  const std::string stem = bucket_file_stem(bucket);
  if (!regressions_dir.empty() && !is_mutant(backend)) return (fs::path(regressions_dir) / (stem + ".json")).string();
  return (fs::path(out_dir) / ("shrunk-" + stem + ".json")).string();
}

// Shrinks c and writes the result to path_of(bucket of the shrunk case).
ShrinkRecord shrink_and_save(const Case& c, const CaseVerdict& v, Backend& b, double budget_s,
                             const std::function<std::string(const std::string&)>& path_of, const std::string& origin) {
  ShrinkOptions so;
  so.time_budget_s = budget_s;
  ShrinkResult s = shrink_case(c, v, b, so);
  Case out = s.shrunk;
  out.note = "shrunk from " + origin + " (" + describe(c) + "); bucket " + s.verdict.bucket;
  const std::string path = path_of(s.verdict.bucket);
  fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  save_case(out, path);
  ShrinkRecord r;
  r.shrunk = out;
  r.bucket = s.verdict.bucket;
  r.file = path;
  r.runs = s.runs;
  r.seconds = s.seconds;
  r.tp = padded_rows(out);
  return r;
}

// Usage errors that need no backend: checked before making one, so that bad usage is exit 2
// even where the backend could not be made (exit 3).
ProfileDefaults checked_defaults(const SessionOptions& o) {
  const ProfileDefaults defaults = profile_defaults(o.profile);
  require(!(o.cases && o.time_budget_s), "--cases", "give either --cases or --time-budget, not both");
  // Report files that could not be written are bad usage, found before the first case.
  if (!o.report.empty()) check_output_file(o.report, "--report");
  if (!o.junit.empty()) check_output_file(o.junit, "--junit");
  if (!o.html.empty()) check_output_file(o.html, "--html");
  require(o.maxfail >= 0, "--maxfail", "must be >= 0");
  return defaults;
}

// The header line of the random stage: which cases it draws, and from which MLA paths, so that a
// run restricted to fewer paths than a case can take says so before its first case.
void print_random_header(const SessionOptions& o, const std::string& bname, const DrawLimits& draw,
                         std::optional<int64_t> random_cases) {
  const std::vector<Path>& paths = draw.paths;
  std::string restriction;
  if (paths.size() < all_paths().size())
    restriction = o.paths ? " (--path " + paths_text(paths) + ")"
                          : " (backend " + bname + " implements " + paths_text(paths) + " only)";
  if (draw.cp) restriction += ", cp " + std::to_string(*draw.cp) + " only (" + draw.cp_from + ")";
  if (const std::string l = limits_text(draw); !l.empty()) restriction += ", within the backend's limits: " + l;
  // A shard names the case numbers it runs: they are those of the unsharded run.
  std::string shard;
  if (o.shard.sharded()) {
    const std::string which = "i % " + std::to_string(o.shard.count) + " == " + std::to_string(o.shard.index);
    shard = ", shard " + o.shard.text() + ": case numbers " +
            (random_cases ? "i < " + std::to_string(*random_cases) + " with " + which + " (" +
                                std::to_string(o.shard.share(*random_cases)) + " of " + std::to_string(*random_cases) + ")"
                          : which + " until the time budget");
  }
  std::printf("random cases: profile %s, seed %llu, paths %s%s%s\n", o.profile.c_str(), (unsigned long long)o.seed,
              paths_text(paths).c_str(), restriction.c_str(), shard.c_str());
  std::fflush(stdout);
}

}  // namespace

std::optional<std::vector<Path>> parse_path_flag(const std::string& value) {
  if (value == "auto") return std::nullopt;
  if (value == "any") return all_paths();
  if (value == "absorbed" || value == "explicit") return std::vector<Path>{parse_path(value, "--path")};
  throw InvalidInput("--path", "must be one of absorbed|explicit|any|auto, got '" + value + "'");
}

std::vector<Path> session_paths(const std::optional<std::vector<Path>>& asked, const Backend& backend) {
  const std::vector<Path> implemented = backend.paths();
  if (!asked) return implemented;
  for (Path p : *asked)
    require(std::find(implemented.begin(), implemented.end(), p) != implemented.end(), "--path",
            "backend " + backend.name() + " implements " + paths_text(implemented) + " only, not " + name(p) +
                " (use --path " + paths_text(implemented) + " or auto)");
  return *asked;
}

std::string paths_text(const std::vector<Path>& paths) {
  std::string s;
  for (Path p : paths) s += (s.empty() ? "" : "+") + std::string(name(p));
  return s;
}

int run_session(const SessionOptions& o) {
  checked_defaults(o);
  std::unique_ptr<Backend> backend = make_backend(o.backend, o.backend_opt);
  return run_session(o, *backend);
}

int run_session(const SessionOptions& o, Backend& backend) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  // SIGINT / SIGTERM from here on stop the run between cases (and the exec backend's command).
  interrupt::Guard guard;

  const ProfileDefaults defaults = checked_defaults(o);
  const std::string bname = backend.name();
  // The files of this run (failing cases, shrunk mutant cases) go into a folder of its own, so
  // that concurrent runs never share one.
  const std::string out_dir = (fs::path(output_dir(o.report)) / run_id(o.seed, o.shard)).string();
  // What random cases may be (and, under fuzz, which corpus cases are selected below): the
  // backend's limits, its paths narrowed by --path; cp: the one CP size it runs (--comm mpi).
  DrawLimits draw = backend.draw_limits();
  draw.paths = session_paths(o.paths, backend);
  if (o.cp) {
    require(!draw.cp || *draw.cp == *o.cp, "--cp",
            "must be the MPI world size " + std::to_string(draw.cp ? *draw.cp : 0) + " under --comm mpi");
    require(draw.allows_cp(*o.cp), "--cp",
            "backend " + bname + " runs cp <= " + std::to_string(draw.max_cp) + " only, not " + std::to_string(*o.cp));
    if (!draw.cp) draw.cp_from = "--cp";
    draw.cp = o.cp;
  }
  const std::vector<Path>& paths = draw.paths;

  // --time-budget is a hard limit: no random case starts after the budget, and a case still in
  // flight at 1.5x the budget is stopped (the exec backend caps its command there) and reported
  // unfinished. In-process backends cannot be stopped mid-case.
  std::optional<double> hard_limit_s;
  if (o.time_budget_s) {
    hard_limit_s = 1.5 * *o.time_budget_s;
    interrupt::set_deadline(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*hard_limit_s)));
  }

  // The oracle is made once per session (the GPU one keeps its device state across cases).
  std::unique_ptr<Oracle> oracle = make_oracle(o.oracle);
  const bool quiet = o.output < 0;
  if (!quiet) std::printf("oracle: %s (--oracle %s)\n", oracle->name().c_str(), o.oracle.c_str());

  // Repro lines: the terminal's and JUnit's run here (the binary as invoked, absolute case paths);
  // the report's are relative to the report's folder, with `dsa-parity` from PATH.
  ReproSpec here;
  here.binary = invoked_binary();
  here.options = {"--backend", bname};
  if (o.oracle != "cpu") here.options.insert(here.options.end(), {"--oracle", o.oracle});
  if (o.backend_opt.comm != "auto") here.options.insert(here.options.end(), {"--comm", o.backend_opt.comm});
  if (o.repeat > 1) here.options.insert(here.options.end(), {"--repeat", std::to_string(o.repeat)});
  auto add_seconds = [&](const char* flag, double s) {
    char b[40];
    std::snprintf(b, sizeof b, "%g", s);
    here.options.insert(here.options.end(), {flag, b});
  };
  if (o.backend_opt.exec_timeout_s != BackendOptions{}.exec_timeout_s)
    add_seconds("--exec-timeout", o.backend_opt.exec_timeout_s);
  if (o.case_timeout_s > 0)  // a case that timed out here times out again, rather than hang
    add_seconds("--case-timeout", o.case_timeout_s);
  if (o.backend_opt.comm == "mpi") {  // one process per rank again, as many as this run had
    here.launcher = "mpirun -np " + std::to_string(o.world_size);
    if (o.backend_opt.rank_timeout_s != BackendOptions{}.rank_timeout_s)
      add_seconds("--rank-timeout", o.backend_opt.rank_timeout_s);
  }
  if (limits().max_bytes != 0) here.options.insert(here.options.end(), {"--max-bytes", std::to_string(limits().max_bytes)});
  if (limits().max_pairs != Limits{}.max_pairs)
    here.options.insert(here.options.end(), {"--max-pairs", std::to_string(limits().max_pairs)});
  here.env = repro_environment();
  ReproSpec portable = here;
  portable.binary = "dsa-parity";
  const std::string report_dir =
      o.report.empty() ? std::string() : fs::absolute(o.report).parent_path().lexically_normal().string();
  auto in_report = [&](const std::string& path) { return report_path(path, report_dir, o.case_root); };
  auto absolute = [](const std::string& path) { return fs::absolute(path).lexically_normal().string(); };

  RunContext ctx;
  ctx.command = o.command;
  ctx.arguments = o.arguments;
  ctx.backend = bname;
  ctx.oracle = oracle->name();
  ctx.profile = o.profile;
  ctx.master_seed = o.seed;
  ctx.maxfail = o.maxfail;
  ctx.keep_worst = o.keep_worst;
  ctx.repeat = o.repeat;
  ctx.started = utc_now();
  ctx.shard = o.shard;
  if (o.random) ctx.paths = paths;
  ctx.comm = o.backend_opt.comm;
  ctx.world_size = o.world_size;
  ctx.rank_devices = o.rank_devices;

  // fuzz selects its corpus by path (and cp, when the backend runs one) as it draws its random
  // cases: a corpus case the run does not draw is not selected (listed on stdout and in the report,
  // never run, never a pass). replay and repro run every file they are given. Every file is read,
  // whatever the shard, so that each case gets the number the unsharded run gives it (the selected
  // files in order, then the random cases) and every shard lists the same files not selected; a
  // shard runs the files at positions j % N == I of the list.
  struct CaseFile {
    std::string file;
    Case c;
    int64_t index;  // its number in the unsharded run
  };
  std::vector<CaseFile> files;
  // (file as given, why), for stdout; the report's are relative to its folder
  std::vector<std::pair<std::string, std::string>> not_selected;
  int64_t selected = 0;
  for (size_t j = 0; j < o.case_files.size(); ++j) {
    const std::string& file = o.case_files[j];
    Case c = load_case_file(file);
    const std::string why = o.random ? outside(c, draw) : std::string();
    if (!why.empty()) {
      not_selected.emplace_back(file, why), ctx.not_selected.push_back(in_report(file));
      continue;
    }
    const int64_t index = selected++;
    if (o.shard.owns(static_cast<int64_t>(j))) files.push_back({file, std::move(c), index});
  }
  const int64_t first_random = selected;  // random case i is case number first_random + i

  std::optional<int64_t> random_cases;
  if (o.random) random_cases = o.cases ? *o.cases : o.time_budget_s ? std::optional<int64_t>() : defaults.cases;
  std::optional<int64_t> total;  // this shard's
  if (!o.random || random_cases)
    total = static_cast<int64_t>(files.size()) + (random_cases ? o.shard.share(*random_cases) : 0);
  Progress progress(o.progress && !quiet, total, o.time_budget_s, o.progress_every_s);

  // The case after the one in flight is generated beside it (harness/prefetch.hpp); with an
  // oracle on a device, the backend runs it too while the case in flight is judged, both cases
  // being small beside the device (backend_ahead_limit). Not under --repeat, whose runs follow the
  // judge, nor --comm mpi, whose ranks' runs are collectives of their own. Decided before the report
  // opens: its context records it.
  CasePrefetch prefetch;
  if (const double limit = o.backend_ahead_bytes ? *o.backend_ahead_bytes : backend_ahead_limit(*oracle);
      limit > 0 && o.repeat == 1 && o.backend_opt.comm != "mpi") {
    prefetch.run_backends_ahead(backend, limit, oracle.get());
    ctx.backend_ahead = true;
    if (!quiet)
      std::printf("backend runs ahead: each next case's backend run goes beside this case's oracle (cases of at most "
                  "%.3g GB of inputs)\n",
                  limit / 1e9);
  }
  // The report and JUnit stream to disk as cases finish; only counts and bucket rows stay in
  // memory (RunTally), never the case records.
  std::optional<ReportStream> report;
  std::optional<JunitStream> junit;
  if (!o.report.empty()) report.emplace(o.report, ctx, /*indent=*/total && *total <= 1000);
  if (!o.junit.empty()) junit.emplace(o.junit, ctx);

  RunTally tally;
  std::set<std::string> shrunk_keys;
  int stop_signal = 0;     // SIGINT / SIGTERM received: the run ends after what is done
  bool past_limit = false;  // the hard time limit passed

  // What the stall watch shares with this thread (under session_mu): the tally and the outputs,
  // and the case in flight, so that a case that never returns can be written up from there.
  std::mutex session_mu;
  struct InFlight {
    CaseRecord r;                        // its identity; once it failed, its case file and repro lines
    std::optional<CaseVerdict> verdict;  // once judged (its shrinking may still run)
    double started_s = 0;                // elapsed() when it started (--case-timeout)
  };
  std::optional<InFlight> in_flight;

  auto record_locked = [&](const CaseRecord& r) {  // session_mu held
    tally.add(r);
    if (report) report->add(r);
    if (junit) junit->add(ctx, r);
  };
  auto record = [&](CaseRecord& r) {
    std::lock_guard<std::mutex> lock(session_mu);
    record_locked(r);
    progress.update(tally.cases, tally.failed, tally.passed);
  };
  // A failing (or given-up) case's file and repro lines: a random case is written to out_dir, and
  // so is a corpus case the report could name only from the corpus (report_path), so that the
  // repro line runs from the report's folder; the report names the file relative to its folder.
  auto add_case_file = [&](CaseRecord& r) {
    if (!r.case_file.empty() && is_corpus_relative(in_report(r.case_file))) r.case_file.clear();
    if (r.case_file.empty()) {
      r.case_file = (fs::path(out_dir) / ("case-" + std::to_string(r.index) + ".json")).string();
      fs::create_directories(out_dir);
      save_case(r.c, r.case_file);
    }
    r.repro_here = repro_line(here, absolute(r.case_file));
    r.case_file = in_report(r.case_file);
    r.repro = repro_line(portable, r.case_file);
  };
  // The name a case keeps from run to run (JUnit): its corpus file, or a hash of its JSON.
  auto case_name = [&](const std::string& file, const Case& c) {
    if (file.empty()) return random_case_name(c);
    return relative_to(file, o.case_root);
  };
  auto unfinished = [&](CaseRecord& r, const std::string& what) {
    r.unfinished = true;
    r.v = CaseVerdict{};
    r.v.verdict = Verdict::not_run;
    char b[160];
    std::snprintf(b, sizeof b, "unfinished: %s at the hard time limit, 1.5 x --time-budget (%.3g s)", what.c_str(),
                  hard_limit_s ? *hard_limit_s : 0.0);
    r.v.message = b;
  };

  // Runs case number index and records it; false when the run must stop (a signal, the hard time limit).
  auto run_one = [&](const Case& c, const std::string& origin, const std::string& file, int64_t index) {
    CaseRecord r;
    r.index = index;
    r.origin = file.empty() ? origin : in_report(origin);
    r.name = case_name(file, c);
    r.c = c;
    r.case_file = file;
    {
      std::lock_guard<std::mutex> lock(session_mu);
      in_flight = InFlight{r, std::nullopt, elapsed()};
    }
    struct Landed {  // the case is not in flight once run_one returns, however it returns
      std::mutex& mu;
      std::optional<InFlight>& in_flight;
      ~Landed() {
        std::lock_guard<std::mutex> lock(mu);
        in_flight.reset();
      }
    } landed{session_mu, in_flight};
    try {
      r.v = run_case(c, backend, oracle.get(), o.repeat, &prefetch);
      std::lock_guard<std::mutex> lock(session_mu);
      in_flight->verdict = r.v;
    } catch (const InvalidInput& e) {
      if (!file.empty()) throw InvalidInput(file + ": " + e.field, e.rule);
      r.v.verdict = Verdict::cannot_run;  // a generator bug: reported, never a pass
      r.v.message = std::string("the generated case is invalid: ") + e.what();
    } catch (const interrupt::Stopped& s) {
      if (s.signal) {  // the case in flight is not done: the report holds the cases before it
        stop_signal = s.signal;
        return false;
      }
      unfinished(r, "stopped");
      past_limit = true;
    }
    if (r.v.failed()) {
      add_case_file(r);
      {
        std::lock_guard<std::mutex> lock(session_mu);
        in_flight->r = r;  // its case file and repro lines, should its shrinking never end
      }
      progress.finish();
      if (quiet)
        std::printf("FAIL %s  repro: %s\n", r.v.bucket.c_str(), r.repro_here.c_str());
      else
        std::printf("FAIL %s\n  case %lld (%s): %s\n  %s\n  repro: %s\n", r.v.bucket.c_str(), (long long)r.index,
                    origin.c_str(), describe(c).c_str(), r.v.message.c_str(), r.repro_here.c_str());
      // One shrink per bucket (stage, tensor, class): the feature tags vary from case to case but
      // shrinking drops them anyway.
      // Not after a rank failure: every later run would fail the same way, whatever the case.
      if (o.shrink && !backend.rank_failure() &&
          shrunk_keys.insert(r.v.stage_name() + "/" + r.v.tensor + "/" + name(r.v.failure)).second) {
        auto path_of = [&](const std::string& bucket) { return shrunk_path(o.regressions_dir, out_dir, bname, bucket); };
        prefetch.wait_for_backend();  // shrinking runs the backend here: never two runs at once
        try {
          r.shrunk = shrink_and_save(c, r.v, backend, defaults.shrink_budget_s, path_of, in_report(origin));
          r.shrunk->file_here = absolute(r.shrunk->file);
          r.shrunk->file = in_report(r.shrunk->file);
          if (!quiet)
            std::printf("  shrunk (%lld runs, %.1f s) to %s: %s\n", (long long)r.shrunk->runs, r.shrunk->seconds,
                        r.shrunk->file_here.c_str(), describe(r.shrunk->shrunk).c_str());
        } catch (const interrupt::Stopped& s) {  // the case is done; its shrinking is not
          std::printf("  shrinking stopped (%s)\n", s.signal ? "interrupted" : "time limit");
          if (s.signal)
            stop_signal = s.signal;
          else
            past_limit = true;
        }
      }
      std::fflush(stdout);
    } else {
      if (!r.case_file.empty()) r.case_file = in_report(r.case_file);
      if (r.v.verdict != Verdict::pass && !quiet) {
        progress.finish();
        std::printf("%s: case %lld (%s): %s\n  %s\n", name(r.v.verdict), (long long)r.index, origin.c_str(),
                    describe(c).c_str(), r.v.message.c_str());
      }
    }
    if (o.output > 0 && !o.verbose) {
      double worst = -1;
      std::string at;
      for (auto& t : r.v.checks)
        if (t.status != CheckStatus::not_checked && margin_of(t) > worst) {
          worst = margin_of(t);
          at = t.tensor;
        }
      progress.finish();
      std::printf("%-4s case %lld (%s): %s  worst margin %.3g (%s)\n", r.v.verdict == Verdict::pass ? "ok" : name(r.v.verdict),
                  (long long)r.index, origin.c_str(), describe(c).c_str(), worst, at.empty() ? "-" : at.c_str());
    }
    if (o.verbose) std::printf("%s %s\n%s", name(r.v.verdict), describe(c).c_str(), checks_table(r.v).c_str());
    record(r);
    if (!stop_signal) stop_signal = interrupt::pending();
    if (o.maxfail > 0 && tally.failed >= o.maxfail) ctx.maxfail_reached = true;
    return !stop_signal && !past_limit && !ctx.maxfail_reached && !backend.rank_failure();
  };

  // The summary, the report and JUnit (session_mu held); the exit code.
  auto finish_session = [&] {
    ctx.interrupted = stop_signal != 0;
    // Oracles that disagree (--oracle both) fail the run: the verdicts rest on an oracle in doubt.
    ctx.rank_failure = backend.rank_failure();
    ctx.exit_code = stop_signal          ? interrupt::exit_code(stop_signal)
                    : tally.failed || tally.oracle_disagreements ? 1
                    : tally.not_run + tally.cannot_run || ctx.rank_failure ? 3
                                         : 0;
    ctx.seconds = elapsed();
    print_run_summary(ctx, tally, quiet);
    if (ctx.rank_failure)
      std::printf("stopped: rank %d %s: %s\n", ctx.rank_failure->rank, ctx.rank_failure->how.c_str(),
                  ctx.rank_failure->message.c_str());
    if (ctx.maxfail_reached)
      std::printf("stopped after %lld failing cases (--maxfail %lld)\n", (long long)tally.failed, (long long)o.maxfail);
    if (stop_signal)
      std::printf("interrupted by %s after %lld cases: the report and JUnit hold the cases done (exit %d)\n",
                  stop_signal == SIGINT ? "SIGINT" : stop_signal == SIGTERM ? "SIGTERM" : "a signal",
                  (long long)tally.cases, ctx.exit_code);
    finish_outputs(ctx, tally, report ? &*report : nullptr, junit ? &*junit : nullptr, o.html);
    return ctx.exit_code;
  };
  // A case that overruns is given up from the watch's thread (harness/stall_watch.hpp): the case
  // recorded unfinished, or failed as the backend's timeout past --case-timeout (after a signal:
  // left out), the outputs written, the process ended there.
  std::optional<double> signal_seen_s;
  auto give_up_if_stalled = [&] {
    std::lock_guard<std::mutex> lock(session_mu);
    if (!in_flight) return;
    const double now = elapsed();
    const int sig = interrupt::pending();
    if (sig && !signal_seen_s) signal_seen_s = now;
    char why[160];
    bool per_case = false;  // --case-timeout's limit, not the session's
    if (sig && now - *signal_seen_s >= o.stall_after_signal_s)
      std::snprintf(why, sizeof why, "%.3g s after %s", now - *signal_seen_s, sig == SIGINT ? "SIGINT" : "SIGTERM");
    else if (!sig && hard_limit_s && now >= *hard_limit_s + o.stall_grace_s)
      std::snprintf(why, sizeof why, "%.3g s past the hard time limit, 1.5 x --time-budget (%.3g s)", now - *hard_limit_s,
                    *hard_limit_s);
    else if (!sig && o.case_timeout_s > 0 && !in_flight->verdict && now - in_flight->started_s >= o.case_timeout_s) {
      per_case = true;
      std::snprintf(why, sizeof why, "after %.3g s, past --case-timeout (%.3g s)", now - in_flight->started_s,
                    o.case_timeout_s);
    } else {
      return;
    }
    // Past --case-timeout with the backend's run the one phase open (not the judge): the backend
    // ran past its time limit, a failure of its own, as --exec-timeout makes it for exec: backends.
    const bool backend_stuck =
        per_case && !span_open("judge") && (span_open("backend") || span_open("backend (ahead)"));
    const std::string where = open_spans();
    CaseRecord r = in_flight->r;
    progress.finish();
    std::printf("stopped: case %lld (%s) still running %s; given up, in flight: %s\n", (long long)r.index,
                r.origin.c_str(), why, where.empty() ? "(no open span)" : where.c_str());
    if (sig) {
      stop_signal = sig;
    } else {
      if (in_flight->verdict) {  // judged: its shrinking is what did not end
        r.v = *in_flight->verdict;
        r.v.message += " (its shrinking did not finish)";
      } else {
        r.v = CaseVerdict{};
        if (backend_stuck) {
          r.v.verdict = Verdict::fail;
          r.v.tensor = "-";
          r.v.failure = Failure::timeout;
          r.v.message = std::string("timed out: the backend still running ") + why + "; in flight: " + where;
          r.v.bucket = make_bucket(bname, r.v.stage_name(), r.v.tensor, r.v.failure);
        } else {
          r.unfinished = true;
          r.v.verdict = Verdict::not_run;
          r.v.message = std::string("unfinished: still running ") + why + "; in flight: " + where;
        }
        // Its case file and repro lines, as a failure's, so that the stuck case can be run again.
        try {
          add_case_file(r);
          std::printf("%s  repro: %s\n", r.v.failed() ? ("FAIL " + r.v.bucket).c_str() : "not-run", r.repro_here.c_str());
        } catch (const std::exception& e) {  // the report is still written, without them
          std::printf("(its case file could not be written: %s)\n", e.what());
          r.case_file.clear();
        }
      }
      record_locked(r);
    }
    const int code = finish_session();
    std::fflush(stdout);
    std::fflush(stderr);
    interrupt::kill_groups();  // no backend process outlives the session (exec:, exec2: workers)
    std::_Exit(code);  // the stuck threads are never joined: no destructor may wait for them
  };
  std::optional<StallWatch> watch;
  watch.emplace(give_up_if_stalled);

  if (o.shard.sharded() && !quiet)
    std::printf("shard %s: %lld of the %zu case files (positions j %% %lld == %lld)\n", o.shard.text().c_str(),
                (long long)o.shard.share(static_cast<int64_t>(o.case_files.size())), o.case_files.size(),
                (long long)o.shard.count, (long long)o.shard.index);
  if (o.random && !quiet) print_random_header(o, bname, draw, random_cases);
  if (!quiet)
    for (const auto& [file, why] : not_selected) std::printf("corpus case not selected (%s): %s\n", why.c_str(), file.c_str());
  // A rank that failed the start (--comm mpi handshake) runs no case: the report says why.
  bool go = !(stop_signal = interrupt::pending()) && !backend.rank_failure();
  auto random_at = [&](int64_t i) { return random_case(o.profile, o.seed, i, draw); };
  auto random_runs = [&](int64_t i) { return o.random && !(random_cases && i >= *random_cases); };
  // The cases at run positions pos + 1 and pos + 2 (the corpus files, then this shard's random
  // cases) are started ahead (harness/prefetch.hpp).
  auto start_after = [&](size_t pos) {
    for (size_t p = pos + 1; p <= pos + 2; ++p) {
      if (p < files.size()) {
        prefetch.start(files[p].c);
        continue;
      }
      const int64_t i = o.shard.index + int64_t(p - files.size()) * o.shard.count;
      if (random_runs(i)) prefetch.start(random_at(i));
    }
  };
  for (size_t k = 0; k < files.size(); ++k) {
    auto& [file, c, index] = files[k];
    if (!go) break;
    if (hard_limit_s && elapsed() >= *hard_limit_s) past_limit = true;
    if (past_limit) {  // corpus cases always start, unless the hard limit has passed: listed, not run
      CaseRecord r;
      r.index = index;
      r.origin = in_report(file);
      r.name = case_name(file, c);
      r.c = c;
      r.case_file = in_report(file);
      unfinished(r, "not started");
      record(r);
      continue;
    }
    start_after(k);
    go = run_one(c, file, file, index);
  }
  if (o.random && go && !past_limit) {
    // This shard's random cases: i = I, I + N, ... (all of them under --shard 0/1).
    for (int64_t i = o.shard.index, pos = int64_t(files.size());; i += o.shard.count, ++pos) {
      if (random_cases && i >= *random_cases) break;
      if (o.time_budget_s && elapsed() >= *o.time_budget_s) break;
      const Case c = random_at(i);
      start_after(size_t(pos));
      if (!run_one(c, "random " + o.profile + " seed " + std::to_string(o.seed) + " #" + std::to_string(i), "",
                   first_random + i))
        break;
    }
  }
  watch.reset();  // (before session_mu is taken for good: its check takes it too)
  progress.finish();
  interrupt::set_deadline(std::nullopt);
  std::lock_guard<std::mutex> lock(session_mu);
  return finish_session();
}

int run_shrink(const std::string& file, const std::string& backend_spec, const BackendOptions& bopt,
               const std::string& out, double budget_s) {
  const Case c = load_case_file(file);
  std::unique_ptr<Backend> backend = make_backend(backend_spec, bopt);
  CaseVerdict v;
  try {
    v = run_case(c, *backend);
  } catch (const InvalidInput& e) {
    throw InvalidInput(file + ": " + e.field, e.rule);
  }
  if (v.verdict == Verdict::pass) {
    std::printf("%s passes on %s: nothing to shrink\n", file.c_str(), backend->name().c_str());
    return 0;
  }
  if (!v.failed()) {
    std::printf("%s: %s on %s: %s\n", file.c_str(), name(v.verdict), backend->name().c_str(), v.message.c_str());
    return 3;
  }
  std::printf("FAIL %s\n  %s\n  %s\n", v.bucket.c_str(), describe(c).c_str(), v.message.c_str());
  const std::string corpus = default_corpus();
  auto path_of = [&](const std::string& bucket) {
    if (!out.empty()) return out;
    return shrunk_path(corpus.empty() ? "cases/regressions" : corpus + "/regressions", output_dir(""), backend->name(),
                       bucket);
  };
  ShrinkRecord s = shrink_and_save(c, v, *backend, budget_s, path_of, file);
  std::printf("shrunk in %lld runs (%.1f s): %s\n  bucket %s\n  wrote %s\n  repro: %s\n", (long long)s.runs, s.seconds,
              describe(s.shrunk).c_str(), s.bucket.c_str(), s.file.c_str(),
              repro_line(ReproSpec{invoked_binary(), {"--backend", backend->name()}, repro_environment(), ""},
                         fs::absolute(s.file).lexically_normal().string())
                  .c_str());
  return 1;
}

}  // namespace dsa
