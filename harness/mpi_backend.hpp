// Rank 0's side of `--comm mpi`: the backend the session (run_session) runs its cases on. For each
// case, run() sends the case JSON to every other rank, waits until each confirms the same case and
// inputs (hashes of the part it generated: mpi_rank_part.hpp), lets them go, runs rank 0's own part
// (the reference core, or the fused kernels) on a thread of its own (its collectives meet the
// other ranks'), gathers the other ranks' RankResults and assembles the global Result exactly as
// run_core_sharded and run_fused do in process.
//
// Every wait polls with the --rank-timeout deadline and watches for fault notices, so a rank that
// crashes, hangs or disagrees fails the case (crash or timeout, the message naming the rank and
// what it was doing) and sets rank_failure(): the session records the case, stops, writes its
// report, and the driver then ends the job (harness/mpi_session.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/backend.hpp"
#include "harness/mpi_channel.hpp"
#include "harness/mpi_fault_injection.hpp"
#include "harness/mpi_rank_part.hpp"

namespace dsa::mpi {

class MpiBackend final : public Backend {
 public:
  // spec: reference | lowp | mutant:NAME | cuda, whose ranks run `part`; threads: rank 0's OpenMP
  // threads for its part (what an in-process rank gets).
  MpiBackend(Channel& ch, RankPart& part, std::string spec, double rank_timeout_s, int threads,
             std::vector<PlantedFault> faults);
  ~MpiBackend() override;

  std::string name() const override { return spec_; }
  std::vector<Path> paths() const override { return part_.paths(); }
  std::vector<std::string> deterministic() const override { return part_.deterministic(); }
  BackendRun run(const Case& c, const PreparedCase& pc) override;
  std::optional<int64_t> cp_size() const override { return ch_.size(); }
  std::optional<RankFailure> rank_failure() const override { return failure_; }

  // The start handshake: every other rank's hello, compared with rank 0's (`mine`). A rank that
  // differs is a rank failure (disagree); one that does not answer in time, a timeout.
  void handshake(const nlohmann::json& mine);
  // Whether ranks may still be inside a case (a crash, a hang, an interrupt): the job must then
  // end with MPI_Abort, since they will never take an end message.
  bool must_abort() const { return abort_; }
  // Tells every other rank that the run is over; false when one did not take it in time.
  bool end();

 private:
  struct Seen;      // what rank 0 knows of each rank during a case
  struct OwnRank;   // rank 0's own part, on its thread
  bool pump(int64_t seq);  // drains the waiting messages; true when any came
  template <class Done>
  void wait_until(Done done, int64_t seq, const char* stage);
  [[noreturn]] void fail(int rank, const std::string& how, const std::string& message, bool abort);
  [[noreturn]] void timed_out(const char* stage);
  std::vector<int> late_ranks(bool agreeing) const;
  std::string state_of(int rank) const;
  static void dump_for_tests(const Case& c, const Result& r, int64_t seq);

  Channel& ch_;
  RankPart& part_;
  std::string spec_;
  double timeout_s_;
  int threads_;
  std::vector<PlantedFault> faults_;
  int64_t seq_ = 0;
  Clock::time_point deadline_;
  std::vector<Seen> seen_;
  std::shared_ptr<OwnRank> own_;
  std::optional<RankFailure> failure_;
  bool abort_ = false;
};

}  // namespace dsa::mpi
