// Subcommands of the one `dsa-parity` binary register themselves here (one cmd_*.cpp each).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace dsa::cli {

struct Command {
  std::string name;
  std::string usage;    // one line, after "dsa-parity NAME"
  std::string summary;  // one line, for `dsa-parity --help`
  // argv[0] is the subcommand name. Returns the exit code (DESIGN.md: 0 pass, 1 parity failure,
  // 2 bad input, 3 environment cannot run it). InvalidInput and Unavailable are mapped by main.
  std::function<int(int argc, char** argv)> run;
};

std::vector<Command>& commands();

struct RegisterCommand {
  explicit RegisterCommand(Command c) { commands().push_back(std::move(c)); }
};

}  // namespace dsa::cli
