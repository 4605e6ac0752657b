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
#include "harness/shard.hpp"

namespace dsa {

struct SessionOptions {
  std::string command = "fuzz";          // fuzz | replay | repro (the report's context)
  std::vector<std::string> arguments;    // the command line, for the report
  std::string backend = "auto";
  BackendOptions backend_opt;
  std::string oracle = "cpu";            // --oracle cpu|gpu|both|auto (harness/oracle_choice.hpp)
  uint64_t seed = 1;
  std::string profile = "default";
  bool random = true;                    // run random cases after the case files
  // fuzz --path: the MLA paths random cases take; nullopt (auto) = what the backend implements.
  std::optional<std::vector<Path>> paths;
  // fuzz --cp N: the one CP size of random cases (corpus cases of another size not selected).
  std::optional<int64_t> cp;
  std::optional<int64_t> cases;          // random cases; the profile's default when neither is set
  std::optional<double> time_budget_s;   // random cases until this much wall time has passed
  std::vector<std::string> case_files;   // run first, in order
  std::string report, junit;             // output files ("" = none)
  bool shrink = false;
  std::string regressions_dir;           // shrunk cases of real backends ("" = the output folder)
  bool verbose = false;                  // print every checked tensor of every case (repro)
  bool progress = true;
  int output = 0;                        // -1 -q (summary, buckets, failures' repro lines), 0 normal, 1 -v (every case)
  double progress_every_s = 30;          // off a TTY: a progress line every this many seconds (0 = none)
  int64_t maxfail = 0;                   // --maxfail N: stop after N failing cases (0 = never)
  int64_t keep_worst = 10;               // full records of the worst passing cases (report worst_passing)
  int repeat = 1;                        // --repeat N: backend runs per case (check/repeats.hpp)
  std::string html;                      // --html FILE ("" = none)
  std::string case_root;                 // the folder case_files came from: their JUnit names are relative to it
  // --shard I/N (harness/shard.hpp): this job runs case_files[j] for j % N == I and the random
  // cases i < cases (the total over all shards) with i % N == I. Every case keeps the number the
  // unsharded run gives it (report index, case-<index>.json), so the shards' reports merge into it.
  Shard shard;
  int world_size = 1;                    // processes of the run: the MPI world size under --comm mpi
  // A case still running stall_grace_s after the hard time limit (1.5 x --time-budget), or
  // stall_after_signal_s after SIGINT/SIGTERM, is given up (harness/stall_watch.hpp): the report and
  // JUnit are written (the case unfinished; after a signal left out, as a signal leaves the case in
  // flight), where each thread was is printed, and the process exits with the session's code.
  double stall_grace_s = 60;
  double stall_after_signal_s = 10;
  // --case-timeout: a case not yet judged this many seconds after it started is given up the same
  // way, with or without --time-budget: failed as the backend's timeout where its run is what has
  // not returned, else recorded unfinished; 0: no such limit.
  double case_timeout_s = 0;
  // Tests only: run the backend ahead (harness/prefetch.hpp) for cases of at most this many input
  // bytes whatever the oracle, so that the run-ahead's host side is exercised with the CPU oracle;
  // unset: backend_ahead_limit(oracle), 0 for an oracle on the host.
  std::optional<double> backend_ahead_bytes;
  std::vector<std::string> rank_devices; // --backend cuda --comm mpi: each rank's GPU (rank_devices.hpp's describe)
};

struct ProfileDefaults {
  int64_t cases;           // random cases when neither --cases nor --time-budget is given
  double shrink_budget_s;  // per shrunk bucket
};
// Throws InvalidInput("--profile", ...) for an unknown profile.
ProfileDefaults profile_defaults(const std::string& profile);

// The corpus replayed by default: DSA_SOURCE_DIR/cases when it exists, else "".
std::string default_corpus();

// Every *.json under dir (recursively): edge/ first, then regressions/, then the rest, each sorted;
// malformed/ (the corpus of inputs that must be refused, cases/malformed/) is left out.
// A dir that is a file yields itself. Throws InvalidInput(field, ...) when dir does not exist.
std::vector<std::string> corpus_files(const std::string& dir, const std::string& field);

// The folder under which each run writes its failing cases and shrunk mutant cases: next to the
// report (<report without .json>-cases/), else ./dsa-parity-out/. A run writes into a folder of
// its own below it, <output_dir>/<run_id>/, so that concurrent runs never share a file.
std::string output_dir(const std::string& report);
// UTC time, pid and seed: 20261203T081500Z-12345-seed7; a shard's ends in -shard1of4.
std::string run_id(uint64_t seed, const Shard& shard = {});

// fuzz --path: absorbed | explicit | any (both) | auto (nullopt: what the backend implements).
// Throws InvalidInput("--path", ...) for any other value.
std::optional<std::vector<Path>> parse_path_flag(const std::string& value);

// The MLA paths random cases are drawn from: asked, or backend.paths() when nullopt. Asking for a
// path the backend does not implement is InvalidInput("--path", "backend cuda implements absorbed
// only ..."): such a run could only report those cases as cannot-run.
std::vector<Path> session_paths(const std::optional<std::vector<Path>>& asked, const Backend& backend);

// "absorbed", "absorbed+explicit": a set of paths in the header line and in messages.
std::string paths_text(const std::vector<Path>& paths);

// Runs the session; returns the exit code (0 all passed, 1 a failure, 3 some case could not run
// and none failed, 130 / 143 stopped by SIGINT / SIGTERM: the report and JUnit then hold the
// cases done, marked interrupted). InvalidInput (exit 2) and Unavailable (exit 3) propagate; a
// --report or --junit path that cannot be written is InvalidInput before the first case. The
// report and JUnit are streamed to disk as cases finish (harness/report.hpp). A case that overruns
// (SessionOptions::stall_grace_s) ends the process from another thread, after writing them.
int run_session(const SessionOptions& o);
// The same on a backend made by the caller (o.backend and o.backend_opt are not used).
int run_session(const SessionOptions& o, Backend& backend);

// `dsa-parity shrink`: shrinks the failing case in file to out ("" = the regressions folder of
// the backend, see SessionOptions). Returns 1 when the case fails (and was shrunk), 0 when it
// passes, 3 when it cannot run.
int run_shrink(const std::string& file, const std::string& backend, const BackendOptions& bopt,
               const std::string& out, double budget_s);

}  // namespace dsa
