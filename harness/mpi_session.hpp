// `--comm mpi`: fuzz, repro and replay with one process per CP rank, launched by mpirun or srun
// (README "One process per CP rank"). Built only with MPI (target dsa_harness_mpi).
//
// Rank 0 drives the session exactly as in one process (run_session: the case stream, the CPU
// oracle, the report, JUnit and stdout are its alone) on an MpiBackend (mpi_backend.hpp); every
// other rank serves cases: it receives a case's JSON, generates the inputs from its seed (the
// Philox streams make them the same whoever generates them), confirms the case and input hashes,
// runs its own rank of the reference core over MpiHostComm and sends its rows to rank 0. Cases
// have cp = the world size: random ones are drawn so, corpus files of another cp are not selected
// (fuzz) or cannot run (replay, repro).
//
// Faults end the run, never hang it and never pass it: a start handshake compares every rank's
// build and backend; a rank that crashes (a watchdog thread tells rank 0, mpi_watchdog.hpp),
// hangs past --rank-timeout or disagrees on a case fails that case naming the rank, the session
// stops, rank 0 writes its report (summary.rank_failure) and ends the job (MPI_Abort when ranks may
// be stuck, else an end message to each).
#pragma once

#include <string>

#include "harness/fuzz.hpp"

namespace dsa {

// Runs session o (o.backend_opt.comm == "mpi", o.backend a reference backend) on this process's
// rank. Rank 0 returns the session's exit code; the other ranks return 0 once rank 0 has ended the
// run (the launcher reports rank 0's code). tool_version (`dsa-parity --version`) is part of the
// handshake. Unavailable when the MPI library lacks MPI_THREAD_MULTIPLE.
int run_mpi_session(const SessionOptions& o, const std::string& tool_version);

}  // namespace dsa
