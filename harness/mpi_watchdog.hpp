// The watchdog of a rank other than 0 under `--comm mpi`: a thread that makes sure rank 0 hears of
// this rank's end, whatever it is, and that the job cannot hang for ever.
//
// * Crashes. A fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) or exit() before the run
//   has ended hands a notice to the thread (through a pipe: all the signal handler does besides
//   waiting); the thread sends it to rank 0 (Tag::fault). The crashing thread then waits, up to a
//   grace period, for rank 0 to write its report and abort the job, and dies as it would have.
//   Without that wait the launcher would kill rank 0 (mpirun does, a second after a rank dies)
//   before it could say which rank failed.
// * Errors. An exception in the rank's part of a case goes the same way (notice, no crash).
// * Deadline. A case that runs past its backstop (twice --rank-timeout and a margin: rank 0's own
//   deadline comes first, then it reports and aborts) makes the thread print why and MPI_Abort.
//
// One per process (the signal handlers are process-wide).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "harness/mpi_channel.hpp"

namespace dsa::mpi {

class RankWatchdog {
 public:
  RankWatchdog(Channel& ch, double rank_timeout_s);
  ~RankWatchdog();  // stops the thread and the crash hooks (the run ended in order)
  RankWatchdog(const RankWatchdog&) = delete;
  RankWatchdog& operator=(const RankWatchdog&) = delete;

  void arm(int64_t seq);  // case seq started: its backstop runs from now
  void disarm();          // it ended
  // Sends rank 0 a fault notice for an exception of case seq (the rank lives on).
  void report_error(int64_t seq, const std::string& what);

 private:
  void loop();
  void send_notice();

  Channel& ch_;
  double backstop_s_;
  std::atomic<int64_t> armed_seq_{-1};
  std::atomic<int64_t> armed_at_ms_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// What this process releases just before it ends the job with MPI_Abort (rank 0 after its report,
// or a watchdog past its backstop): the NCCL communicator a collective may be stuck in
// (ncclCommAbort), so the GPU is let go in order. Set for the scope of the object. The release runs
// on a thread of its own for at most 2 s: one that hangs cannot keep the job from ending.
class BeforeAbort {
 public:
  explicit BeforeAbort(std::function<void()> release);
  ~BeforeAbort();
  BeforeAbort(const BeforeAbort&) = delete;
  BeforeAbort& operator=(const BeforeAbort&) = delete;
};
void release_before_abort();

}  // namespace dsa::mpi
