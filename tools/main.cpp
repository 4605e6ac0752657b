// dsa-parity: one binary, subcommands registered in cmd_*.cpp. Maps errors to the exit codes of
// DESIGN.md: 2 for bad input (one line naming the field and the rule), 3 for an environment that
// cannot run the request, 4 for an internal error (never 1: that is a parity failure). Every
// message is printed as one line of valid UTF-8, capped, whatever the input put into it.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "harness/report.hpp"
#include "harness/text.hpp"
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
  std::fprintf(out, "\nexit codes: 0 all passed, 1 parity failure, 2 bad usage or input, 3 environment cannot run it, "
                    "4 internal error, 130/143 interrupted by SIGINT/SIGTERM\n");
}

int main(int argc, char** argv) {
  if (argc > 0) dsa::set_invoked_binary(argv[0]);  // repro lines name the binary as invoked
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
    auto line = [&](const char* kind, const std::string& what) {
      std::fprintf(stderr, "dsa-parity %s: %s: %s\n", c.name.c_str(), kind, dsa::text::one_line(what, 1000).c_str());
    };
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const dsa::InvalidInput& e) {
      line("error", e.what());
      return 2;
    } catch (const dsa::Unavailable& e) {
      line("cannot run here", e.what());
      return 3;
    } catch (const nlohmann::json::exception& e) {
      // JSON came from outside (a case, a header): bad input, even where no parser named the field.
      line("error", std::string("input: malformed JSON: ") + e.what());
      return 2;
    } catch (const std::bad_alloc&) {
      line("cannot run here", "out of memory (lower the case's size, or --max-bytes)");
      return 3;
    } catch (const std::exception& e) {
      line("internal error", e.what());
      return 4;
    }
  }
  std::fprintf(stderr, "dsa-parity: error: subcommand: unknown %s (see dsa-parity --help)\n",
               dsa::text::quoted(argv[1]).c_str());
  return 2;
}
