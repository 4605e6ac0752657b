// What fuzz, repro and replay share on the command line: the backend, its communicator, the
// oracle, the exec backend's and the MPI ranks' time limits, the report files, --require-device and the size limits.
#pragma once

#include <cstdio>
#include <string>

#include "core/errors.hpp"
#include "harness/backend.hpp"
#include "harness/fuzz.hpp"
#ifdef DSA_HAVE_MPI
#include "harness/mpi_session.hpp"
#endif
#include "tools/command.hpp"
#include "tools/limit_args.hpp"

namespace dsa::cli {

inline const char* const kBackendHelp =
    "reference | lowp | cuda | auto (cuda when a device is present, else lowp; the run prints the choice) | "
    "mutant:NAME (see dsa-parity mutants) | exec:CMD | exec2:CMD";

// --comm: how CP ranks talk. cuda: nccl|local|auto|mpi; the reference backends: local or mpi. mpi is
// one process per rank under an MPI launcher: fuzz, repro and replay only, in a build with Open MPI.
inline CLI::Option* add_comm_flag(CLI::App& app, std::string& comm) {
  return add_value(app, "--comm", comm,
                   "how CP ranks communicate. cuda: nccl|local|auto, or mpi (one process per GPU, NCCL bootstrapped "
                   "over MPI). reference, lowp, mutant:NAME: local (ranks as threads, reference too) or mpi (one "
                   "process per rank). mpi: mpirun -np N dsa-parity fuzz|repro|replay --comm mpi, in a build with "
                   "Open MPI (and NCCL for cuda); auto: as ever",
                   "nccl|local|auto|mpi")
      ->check(one_of({"nccl", "local", "auto", "mpi"}));
}

#ifdef DSA_HAVE_MPI
inline constexpr bool kMpiBuilt = true;
#else
inline constexpr bool kMpiBuilt = false;
#endif

struct SessionFlags {
  std::string backend = "auto", oracle = "cpu", comm = "auto", exec_timeout = "600", rank_timeout = "300", report, junit;
  std::string case_timeout;  // "": no limit
  std::string html, maxfail = "0", keep_worst = "10", progress_every = "30", repeat = "1";
  bool require_device = false, quiet = false, verbose = false;
  LimitFlags limits;
};

inline void add_session_flags(CLI::App& app, SessionFlags& f) {
  add_value(app, "--backend", f.backend, std::string("the implementation under test: ") + kBackendHelp, "B");
  add_value(app, "--oracle", f.oracle,
            "what computes the exact and lowp sides: cpu (the CPU reference), gpu (check/gpu, exit 3 without a "
            "device), both (the CPU the authority, the GPU oracle beside it: a per-tensor agreement table, exit 1 "
            "when they disagree) or auto (gpu when a device is present)",
            "cpu|gpu|both|auto")
      ->check(one_of({"cpu", "gpu", "both", "auto"}));
  add_comm_flag(app, f.comm);
  add_value(app, "--exec-timeout", f.exec_timeout, "exec:/exec2: backends: the time limit of one case, in seconds",
            "SEC")
      ->check(seconds_value());
  add_value(app, "--case-timeout", f.case_timeout,
            "in-process backends and oracles: a case still not judged after SEC seconds is given up, the report "
            "written, and the run ends (a stuck kernel or lock cannot be stopped and the next case run beside "
            "it): a backend run that has not returned fails as a timeout (exit 1), else the case is not-run "
            "(exit 3)",
            "SEC", "none")
      ->check(seconds_value());
  add_value(app, "--rank-timeout", f.rank_timeout,
            "--comm mpi: the longest one case (and the start handshake) may take on the ranks; past it the run "
            "ends, naming the rank that hung",
            "SEC")
      ->check(seconds_value());
  add_value(app, "--report", f.report, "write the JSON report (dsa-parity/report/v1) to FILE (default: none)", "FILE");
  add_value(app, "--junit", f.junit, "write JUnit XML to FILE (default: none)", "FILE");
  add_switch(app, "--require-device", f.require_device,
               "exit 3 (before any case runs) when no CUDA device is present, whatever the backend");
  // Run output (README "Runs, reports, repro lines").
  add_value(app, "--html", f.html, "write a static one-file HTML summary (margins, buckets) to FILE (default: none)",
            "FILE");
  add_value(app, "--maxfail", f.maxfail, "stop after N failing cases, the report written (0: never)", "N")
      ->check(integer_at_least(0));
  add_value(app, "--repeat", f.repeat,
            "run the backend N times per case: tensors it declares deterministic must keep their bits, the "
            "others stay within tolerance of the first run (failure class nondeterministic)",
            "N")
      ->check(integer_at_least(1));
  add_value(app, "--keep-worst", f.keep_worst, "keep the full records of the N passing cases of worst margin", "N")
      ->check(integer_at_least(0));
  add_value(app, "--progress-every", f.progress_every,
            "off a TTY, a progress line every SEC seconds on stderr (0: none)", "SEC");
  add_switch(app, "-q,--quiet", f.quiet, "print only the summary, the bucket table and the failures' repro lines");
  add_switch(app, "-v,--verbose", f.verbose, "print a line for every case");
  add_limit_flags(app, f.limits);
}

inline SessionOptions session_options(const SessionFlags& f, const std::string& command) {
  apply_limit_flags(f.limits);
  SessionOptions o;
  o.command = command;
  o.arguments = command_line();
  o.backend = f.backend;
  o.backend_opt.comm = f.comm;
  o.oracle = f.oracle;
  o.backend_opt.exec_timeout_s = parse_double(f.exec_timeout, "--exec-timeout");
  o.backend_opt.rank_timeout_s = parse_double(f.rank_timeout, "--rank-timeout");
  if (!f.case_timeout.empty()) o.case_timeout_s = parse_double(f.case_timeout, "--case-timeout");
  check_comm(o.backend, o.backend_opt.comm, kMpiBuilt);  // bad usage before anything runs
  o.report = f.report;
  o.junit = f.junit;
  o.html = f.html;
  o.maxfail = parse_int(f.maxfail, "--maxfail");
  o.keep_worst = parse_int(f.keep_worst, "--keep-worst");
  o.repeat = static_cast<int>(std::min<int64_t>(parse_int(f.repeat, "--repeat"), 1 << 20));
  require(!(f.quiet && f.verbose), "-q", "give either -q or -v, not both");
  o.output = f.quiet ? -1 : f.verbose ? 1 : 0;
  o.progress_every_s = parse_double(f.progress_every, "--progress-every");
  require(o.progress_every_s >= 0 && std::isfinite(o.progress_every_s), "--progress-every",
          "must be a number of seconds >= 0 (0: no progress lines off a TTY)");
  return o;
}

// --backend auto: which backend it chooses (harness/backend.cpp: cuda when a device is present,
// else lowp), printed before the run like its `oracle:` line.
inline void announce_backend(const SessionOptions& o) {
  if (o.backend != "auto") return;
  const bool device = cuda_device_present();
  std::printf("backend: %s (--backend auto: %s)\n", device ? "cuda" : "lowp",
              device ? "a CUDA device is present" : "no CUDA device");
  std::fflush(stdout);
}

// --shard I/N (fuzz, replay; harness/shard.hpp): which of N jobs of one run this is.
inline CLI::Option* add_shard_flag(CLI::App& app, std::string& shard, const std::string& what) {
  return add_value(app, "--shard", shard,
                   "run only shard I of N: " + what +
                       " with i % N == I, numbered as in the unsharded run (dsa-parity merge joins the N reports)",
                   "I/N")
      ->check(shard_value());
}

// Runs the session: in this process, or under --comm mpi as this process's CP rank of an MPI job
// (harness/mpi_session.hpp).
inline int run_session_over_comm(const SessionOptions& o) {
#ifdef DSA_HAVE_MPI
  if (o.backend_opt.comm == "mpi") return run_mpi_session(o, version_text());
#endif
  return run_session(o);
}

// --require-device: checked once every flag is valid (bad usage stays exit 2), before the backend.
inline void check_required_device(const SessionFlags& f) {
  if (!f.require_device || cuda_device_present()) return;
#ifdef DSA_HAVE_CUDA
  throw Unavailable("--require-device: no CUDA device is present");
#else
  throw Unavailable("--require-device: this build has no CUDA (configured with DSA_WITH_CUDA off or no nvcc)");
#endif
}

}  // namespace dsa::cli
