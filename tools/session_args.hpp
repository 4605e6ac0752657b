// What fuzz, repro and replay share on the command line: the backend, its communicator, the
// exec backend's time limit, the report files and the size limits of cases.
#pragma once

#include <cmath>
#include <set>
#include <string>

#include "harness/fuzz.hpp"
#include "core/errors.hpp"
#include "tools/args.hpp"
#include "tools/limit_args.hpp"

namespace dsa::cli {

// The flags every session subcommand takes, plus `extra`.
inline std::set<std::string> session_flags(std::set<std::string> extra = {}) {
  extra.insert({"backend", "oracle", "comm", "exec-timeout", "report", "junit"});
  extra.insert({"maxfail", "progress-every", "html", "keep-worst"});  // run output (README "Runs, reports")
  return with_limit_flags(std::move(extra));
}

// The switches every session subcommand takes (-q = --quiet, -v = --verbose), plus `extra`.
inline std::set<std::string> session_switches(std::set<std::string> extra = {}) {
  extra.insert({"quiet", "verbose"});
  return extra;
}

inline SessionOptions session_options(const Args& a, const std::string& command, int argc, char** argv) {
  apply_limit_flags(a);
  SessionOptions o;
  o.command = command;
  for (int i = 0; i < argc; ++i) o.arguments.push_back(argv[i]);
  o.backend = a.get_or("backend", "auto");
  o.backend_opt.comm = a.get_or("comm", "auto");
  o.oracle = a.get_or("oracle", "cpu");
  require(o.oracle == "cpu" || o.oracle == "gpu" || o.oracle == "auto", "--oracle",
          "must be cpu, gpu or auto, got '" + o.oracle + "'");
  o.backend_opt.exec_timeout_s = a.get_double("exec-timeout", o.backend_opt.exec_timeout_s);
  require(o.backend_opt.exec_timeout_s > 0 && std::isfinite(o.backend_opt.exec_timeout_s), "--exec-timeout",
          "must be a number of seconds > 0");
  o.report = a.get_or("report", "");
  o.junit = a.get_or("junit", "");
  o.html = a.get_or("html", "");
  o.maxfail = a.get_int("maxfail", 0, 0);
  o.keep_worst = a.get_int("keep-worst", 10, 0);
  require(!(a.has("quiet") && a.has("verbose")), "-q", "give either -q or -v, not both");
  o.output = a.has("quiet") ? -1 : a.has("verbose") ? 1 : 0;
  o.progress_every_s = a.get_double("progress-every", 30);
  require(o.progress_every_s >= 0 && std::isfinite(o.progress_every_s), "--progress-every",
          "must be a number of seconds >= 0 (0: no progress lines off a TTY)");
  return o;
}

}  // namespace dsa::cli
