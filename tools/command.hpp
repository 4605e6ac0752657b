// Subcommands of the one `dsa-parity` binary register themselves here (one cmd_*.cpp each), as
// CLI11 subcommands: every flag with its help text, its default and the rule it is checked
// against, so that `dsa-parity help NAME`, `dsa-parity NAME --help` and `--help` anywhere on the
// line print all of them. cli.cpp builds the application, parses and reports bad usage as one
// line `dsa-parity NAME: error: --flag: rule` (exit 2); main.cpp runs what was parsed.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace dsa::cli {

// What runs once the command line parsed. Returns the exit code (DESIGN.md: 0 pass, 1 parity
// failure, 2 bad input, 3 environment cannot run it). InvalidInput and Unavailable are mapped by main.
using Run = std::function<int()>;

struct Command {
  std::string name;
  std::string summary;  // one line, for `dsa-parity --help` and the head of `dsa-parity help NAME`
  std::string example;  // the footer of `dsa-parity help NAME`: one or more example lines
  // Adds the subcommand's flags and positionals to app, bound to state that the returned Run owns.
  std::function<Run(CLI::App& app)> setup;
};

std::vector<Command>& commands();

struct RegisterCommand {
  explicit RegisterCommand(Command c) { commands().push_back(std::move(c)); }
};

// The command line after the program name ("fuzz --backend lowp ..."), for the report's context.
const std::vector<std::string>& command_line();

// The application with every registered subcommand, and what runs for each.
struct Cli {
  std::unique_ptr<CLI::App> app;
  std::map<const CLI::App*, Run> runs;
};
Cli make_cli();

// "dsa-parity 0.3.0 (git <sha>[-dirty])": the sha is $DSA_GIT_SHA when set, else the tree's at
// configure time, else unknown.
std::string version_text();

// The outcome of parsing: run set when a subcommand is to run (name is its name); otherwise the
// process exits with exit_code, anything to print already printed (help and --version: 0; bad
// usage: 2, one line on stderr).
struct Parsed {
  std::string name;
  Run run;
  int exit_code = 0;
  std::shared_ptr<Cli> cli;  // owns what run refers to
};
Parsed parse(int argc, char** argv);

// ---- flags: every value is taken as text and checked by these, so the messages are the rule
// ("--seed: must be an integer from 0 to ..."), whatever CLI11 would say.

// One of values (a strict enum): "must be one of a|b|c, got 'x'".
CLI::Validator one_of(const std::vector<std::string>& values);
CLI::Validator integer_at_least(int64_t min_value, const std::string& rule = "");
CLI::Validator uint64_value();
CLI::Validator seconds_value();  // a finite number of seconds > 0
CLI::Validator int_list_value(); // "5,11,0"
CLI::Validator shard_value();    // "1/4" (harness/shard.hpp)

// A value flag bound to into (its default shown as shown_default, or into's initial value).
CLI::Option* add_value(CLI::App& app, const std::string& flag, std::string& into, const std::string& help,
                       const std::string& type, const std::string& shown_default = "");
// A switch (no value: `--json=yes` is refused, as any value).
CLI::Option* add_switch(CLI::App& app, const std::string& flag, bool& into, const std::string& help);
// A positional argument (checked for presence by expect_positional, not by CLI11).
CLI::Option* add_positional(CLI::App& app, const std::string& name, std::string& into, const std::string& help);
// After parsing: no arguments left over (unknown flags, extra positionals), the named positional
// given. Throws InvalidInput naming the flag or the argument.
void expect_no_extras(const CLI::App& app);
void expect_positional(const CLI::App& app, const std::string& name, const std::string& value);

int64_t parse_int(const std::string& text, const std::string& field);
// 0 … 2^64 − 1 (seeds, limits).
uint64_t parse_uint64(const std::string& text, const std::string& field);
double parse_double(const std::string& text, const std::string& field);
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& field);

}  // namespace dsa::cli
