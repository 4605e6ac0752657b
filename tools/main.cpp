// dsa-parity: one binary, subcommands registered in cmd_*.cpp. Maps errors to the exit codes of
// DESIGN.md: 2 for bad input (one line naming the field and the rule), 3 for an environment that
// cannot run the request, 4 for an internal error (never 1: that is a parity failure). Every
// message is printed as one line of valid UTF-8, capped, whatever the input put into it.
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "harness/report.hpp"
#include "harness/text.hpp"
#include "tools/command.hpp"

int main(int argc, char** argv) {
  if (argc > 0) dsa::set_invoked_binary(argv[0]);  // repro lines name the binary as invoked
  // Help, --version and bad usage of the command line (exit 2, one line) end here (tools/cli.cpp).
  const dsa::cli::Parsed c = dsa::cli::parse(argc, argv);
  if (c.run) {
    auto line = [&](const char* kind, const std::string& what) {
      std::fprintf(stderr, "dsa-parity %s: %s: %s\n", c.name.c_str(), kind, dsa::text::one_line(what, 1000).c_str());
    };
    try {
      return c.run();
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
  return c.exit_code;
}
