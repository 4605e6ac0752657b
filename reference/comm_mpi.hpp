// The HostComm of `--comm mpi`: one process per CP rank, the ranks of MPI_COMM_WORLD. It has the
// semantics of LocalHostGroup and gives the same bits: MPI moves the data (MPI_Allgather,
// MPI_Alltoall) and every reduction is summed here in rank order (sum_in_rank_order), never with
// MPI_SUM, whose order of additions MPI leaves to the implementation. Built only with MPI
// (target dsa_reference_mpi), so the rest of the project builds without it.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>

#include "reference/comm.hpp"

namespace dsa {

// A datatype of `count` contiguous elements of `elem`, so that counts beyond INT_MAX (MPI counts
// are int) still move as one element. Freed with the object.
class MpiBlock {
 public:
  MpiBlock(int64_t count, MPI_Datatype elem);
  ~MpiBlock();
  MpiBlock(const MpiBlock&) = delete;
  MpiBlock& operator=(const MpiBlock&) = delete;
  MPI_Datatype type() const { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

// Throws std::runtime_error naming the call when an MPI call did not return MPI_SUCCESS (the
// communicators here use MPI_ERRORS_RETURN, so that a failed call is an error of the case, not an
// abort of the job before rank 0 has written its report).
void mpi_check(int rc, const char* call);

class MpiHostComm final : public HostComm {
 public:
  // The ranks of MPI_COMM_WORLD (MPI must be initialized). Sets MPI_ERRORS_RETURN on it.
  MpiHostComm();
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allgather(const double* send, double* recv, int64_t count) override;
  void reduce_scatter(const double* send, double* recv, int64_t count) override;
  void allreduce_sum(double* buf, int64_t count) override;

  // Called with (collectives entered so far, this one's name, true) on entering each collective
  // and (..., false) on leaving it: the session driver reports every rank's progress with it, so
  // that a hang names the rank that stopped, not the ones waiting for it. Empty: not called.
  std::function<void(int64_t entered, const char* what, bool inside)> observer;
  // Collectives entered so far (the observer's first argument).
  int64_t entered() const { return entered_; }

 private:
  // Scope of one collective: tells the observer on entry and on exit.
  class Scope;
  int rank_ = 0, size_ = 1;
  int64_t entered_ = 0;
};

}  // namespace dsa
