// The driver of `fuzz`, `replay` and `repro` (DESIGN.md CLI contract): case files first (the
// corpus, edge/ then regressions/), then seeded random cases of a profile; each case through
// run_case; every failure written as a one-file reproducer with its repro line, optionally shrunk;
// then the terminal summary, the JSON report and JUnit XML.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/backend.hpp"

namespace dsa {

struct SessionOptions {
  std::string command = "fuzz";          // fuzz | replay | repro (the report's context)
  std::vector<std::string> arguments;    // the command line, for the report
  std::string backend = "auto";
  BackendOptions backend_opt;
  uint64_t seed = 1;
  std::string profile = "default";
  bool random = true;                    // run random cases after the case files
  std::optional<int64_t> cases;          // random cases; the profile's default when neither is set
  std::optional<double> time_budget_s;   // random cases until this much wall time has passed
  std::vector<std::string> case_files;   // run first, in order
  std::string report, junit;             // output files ("" = none)
  bool shrink = false;
  std::string regressions_dir;           // shrunk cases of real backends ("" = the output folder)
  bool verbose = false;                  // print every checked tensor of every case (repro)
  bool progress = true;
};

struct ProfileDefaults {
  int64_t cases;           // random cases when neither --cases nor --time-budget is given
  double shrink_budget_s;  // per shrunk bucket
};
// Throws InvalidInput("--profile", ...) for an unknown profile.
ProfileDefaults profile_defaults(const std::string& profile);

// The corpus replayed by default: DSA_SOURCE_DIR/cases when it exists, else "".
std::string default_corpus();

// Every *.json under dir (recursively): edge/ first, then regressions/, then the rest, each sorted.
// A dir that is a file yields itself. Throws InvalidInput(field, ...) when dir does not exist.
std::vector<std::string> corpus_files(const std::string& dir, const std::string& field);

// Where failing cases and shrunk mutant cases are written: next to the report
// (<report without .json>-cases/), else ./dsa-parity-out/.
std::string output_dir(const std::string& report);

// Runs the session; returns the exit code (0 all passed, 1 a failure, 3 some case could not run
// and none failed). InvalidInput (exit 2) and Unavailable (exit 3) propagate.
int run_session(const SessionOptions& o);

// `dsa-parity shrink`: shrinks the failing case in file to out ("" = the regressions folder of
// the backend, see SessionOptions). Returns 1 when the case fails (and was shrunk), 0 when it
// passes, 3 when it cannot run.
int run_shrink(const std::string& file, const std::string& backend, const BackendOptions& bopt,
               const std::string& out, double budget_s);

}  // namespace dsa
