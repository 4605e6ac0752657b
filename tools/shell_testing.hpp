// For the CLI tests: run a shell line as a user would, and quote a path for it.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <memory>
#include <string>

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

}  // namespace dsa::cli_testing
