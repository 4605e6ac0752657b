// Faults planted in a rank of `--comm mpi`, for the tests of its fault handling only (the README
// lists them): DSA_TEST_MPI_FAULT=RANK:CASE:KIND[,RANK:CASE:KIND ...] makes rank RANK misbehave
// at the CASE-th case sent to the ranks (0-based, in the order rank 0 sends them):
//   exit   exit(3) before its first collective       abort  std::abort()       segv  raise(SIGSEGV)
//   kill   raise(SIGKILL): no word to anyone, the launcher ends the job
//   hang   sleeps for ever before its first collective
//   error  throws std::runtime_error before its first collective
//   seed   generates the case's inputs from seed + 1 (it disagrees with rank 0 on the case)
//   hello  announces another build in the start handshake (CASE is ignored)
// seed and hello act on ranks other than 0 (rank 0 is what the others are compared with).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsa::mpi {

struct PlantedFault {
  int rank = 0;
  int64_t seq = 0;
  std::string kind;
};

// The faults of DSA_TEST_MPI_FAULT (none when unset). InvalidInput naming the variable when it is
// malformed, so that a typo in a test never passes as "no fault".
std::vector<PlantedFault> planted_faults();
// Whether `kind` is planted for rank at case seq (any seq for hello).
bool planted(const std::vector<PlantedFault>& faults, int rank, int64_t seq, const std::string& kind);
// Acts out the crash or hang planted for rank at case seq, if any (exit, abort, segv, kill, hang,
// error); returns when none is. Called by every rank just before its part of the case.
void act_planted(const std::vector<PlantedFault>& faults, int rank, int64_t seq);

}  // namespace dsa::mpi
