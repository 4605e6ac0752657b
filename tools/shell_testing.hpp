// For the CLI tests: run a shell line as a user would (in a folder, stdout and stderr apart), quote
// a path for it, read a file whole and make a fresh folder per test.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "core/test_dirs.hpp"

namespace dsa::cli_testing {

inline std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

struct ShellRun {
  int code = -1;    // exit status; -1 when killed by a signal
  std::string out;  // stdout (redirect stderr in the line to capture it too)
};

inline ShellRun run_shell(const std::string& line) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(line.c_str(), "r"), pclose);
  ShellRun r;
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p.get())) > 0) r.out.append(buf, n);
  const int status = pclose(p.release());
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A file's bytes (empty when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Outcome {
  int code = -1;         // exit status; -1 when killed by a signal
  std::string out, err;  // stdout and stderr, apart
};

// Runs a shell line in folder dir, its stderr kept apart (in dir/stderr.txt).
inline Outcome run_in(const std::string& dir, const std::string& line) {
  const std::string err = dir + "/stderr.txt";
  const ShellRun run = run_shell("cd " + shell_quote(dir) + " && " + line + " 2>" + shell_quote(err));
  return {run.code, run.out, slurp(err)};
}

// A fresh folder per test, named prefix-pid-suite-test (ctest runs tests in parallel processes).
inline std::string scratch(const std::string& prefix) { return dsa::test_dirs::scratch_dir(prefix); }

}  // namespace dsa::cli_testing
