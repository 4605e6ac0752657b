// dsa-parity: one binary, subcommands registered in cmd_*.cpp. Maps errors to the exit codes of
// DESIGN.md: 2 for bad input (one line naming the field and the rule), 3 for an environment that
// cannot run the request.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "core/errors.hpp"
#include "tools/command.hpp"

namespace dsa::cli {
std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}
}  // namespace dsa::cli

static void usage(FILE* out) {
  std::fprintf(out, "dsa-parity: verify fused DeepSeek Sparse Attention kernels against an exact reference\n\n");
  std::fprintf(out, "usage:\n");
  for (auto& c : dsa::cli::commands())
    std::fprintf(out, "  dsa-parity %-8s %s\n      %s\n", c.name.c_str(), c.usage.c_str(), c.summary.c_str());
  std::fprintf(out, "\nexit codes: 0 all passed, 1 parity failure, 2 bad usage or input, 3 environment cannot run it\n");
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (auto& c : dsa::cli::commands()) {
    if (c.name != argv[1]) continue;
    if (argc > 2 && (!std::strcmp(argv[2], "--help") || !std::strcmp(argv[2], "-h")) && c.name != "bench") {
      std::printf("usage: dsa-parity %s %s\n  %s\n", c.name.c_str(), c.usage.c_str(), c.summary.c_str());
      return 0;
    }
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const dsa::InvalidInput& e) {
      std::fprintf(stderr, "dsa-parity %s: error: %s\n", c.name.c_str(), e.what());
      return 2;
    } catch (const dsa::Unavailable& e) {
      std::fprintf(stderr, "dsa-parity %s: cannot run here: %s\n", c.name.c_str(), e.what());
      return 3;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dsa-parity %s: internal error: %s\n", c.name.c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "dsa-parity: error: subcommand: unknown '%s' (see dsa-parity --help)\n", argv[1]);
  return 2;
}
