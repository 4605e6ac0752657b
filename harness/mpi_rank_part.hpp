// What one process computes of a case under `--comm mpi`, by backend family (the session of
// mpi_session.cpp and rank 0's MpiBackend are the same for every family):
//   reference, lowp, mutant:NAME  its rank of the CPU reference core over MpiHostComm; every rank
//                                 generates the whole case (the reference's ranks read every row)
//   cuda                          its rank of the fused kernels over NCCL, bootstrapped over MPI
//                                 once per run and reused; each rank generates only its shard
//                                 (mpi_cuda_part.cpp)
// Rank 0 holds the whole prepared case (the oracle needs it) and takes its part from it; before a
// case runs, every rank's digest of the inputs it generated is compared with rank 0's digest of
// that rank's part, so a shard generated differently is a disagreement, never a wrong verdict.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "check/prepared.hpp"
#include "core/rank_shard.hpp"
#include "harness/backend.hpp"
#include "harness/case.hpp"
#include "harness/rank_devices.hpp"

namespace dsa::mpi {

// One rank's part of a case: the problem and layout, and the inputs it reads (the whole case, or
// its shard: rows L.rank_rows[rank] of every row tensor, the weights whole).
struct RankCase {
  Problem problem;
  StreamLayout layout;
  Inputs inputs;
  std::optional<TensorI> injected;  // global [Tp, K'] rows
};

// Called with (collectives entered so far, this one's name, true) on entering each collective and
// (..., false) on leaving it (MpiHostComm::observer).
using CollectiveObserver = std::function<void(int64_t entered, const char* what, bool inside)>;

class RankPart {
 public:
  virtual ~RankPart() = default;
  // What this rank generates of case c from its seed (a rank other than 0).
  virtual RankCase generate(const Case& c, int rank) const = 0;
  // Rank `rank`'s part of the whole prepared case (rank 0 holds it).
  virtual RankCase take(const PreparedCase& pc, int rank) const = 0;
  // Whether the ranks' parts differ (shards); false: every rank's part is the whole case.
  virtual bool sharded() const { return false; }
  // Runs this process's rank of the case; throws when it fails. Every rank runs the same case.
  virtual RankResult run(const RankCase& rc) = 0;
  // The progress of the collectives (empty: none), and how many were entered so far.
  virtual void observe(CollectiveObserver f) = 0;
  virtual int64_t entered() const = 0;
  // Why case pc cannot run on these ranks at all ("" when it can): decided on rank 0 before any
  // rank is sent the case, so it is a cannot-run verdict, not a rank failure.
  virtual std::string refuses(const PreparedCase& pc) const {
    (void)pc;
    return "";
  }
  // What the backend implements and reproduces (Backend::paths, Backend::deterministic).
  virtual std::vector<Path> paths() const { return all_paths(); }
  virtual std::vector<std::string> deterministic() const { return all_result_tensors(); }
  // Releases what a collective stuck for good holds (ncclCommAbort), just before the job is
  // ended with MPI_Abort. Called from another thread while run() may be blocked.
  virtual void abort() {}
  // Every rank's device ("" for the reference: the CPU), for the report's context.
  virtual std::vector<std::string> devices() const { return {}; }
};

// The digest of a rank's part (its inputs and the injected indices): mpi_wire.hpp's.
uint64_t part_digest(const RankCase& rc);

// The reference backends' part (run options opt: reference_run_options of the backend's name).
std::unique_ptr<RankPart> make_reference_part(RunOptions opt);

// The cuda backend's part: picks this rank's GPU (its local rank modulo the devices it sees),
// gathers every rank's choice and refuses, the same on every rank, a node with more ranks than
// GPUs (InvalidInput, exit 2) or a rank without a device (Unavailable, exit 3). Collective over
// MPI_COMM_WORLD: every rank calls it at the start of the run. Without CUDA or NCCL in the build,
// InvalidInput naming --comm.
std::unique_ptr<RankPart> make_cuda_part();

}  // namespace dsa::mpi
