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
  return with_limit_flags(std::move(extra));
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
  return o;
}

}  // namespace dsa::cli
