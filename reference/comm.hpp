// The in-process communicator the reference's CP execution uses: one thread per rank, the same
// three collectives a fused backend uses on NCCL (DESIGN.md "Fused kernels and communication").
#pragma once

#include <barrier>
#include <cstdint>
#include <vector>

namespace dsa {

class HostComm {
 public:
  virtual ~HostComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // recv[r·count : (r+1)·count] = send of rank r.
  virtual void allgather(const double* send, double* recv, int64_t count) = 0;
  // recv (count elements) = Σ_r send_r[rank·count : (rank+1)·count].
  virtual void reduce_scatter(const double* send, double* recv, int64_t count) = 0;
  // buf = Σ_r buf_r, in place.
  virtual void allreduce_sum(double* buf, int64_t count) = 0;
};

// All ranks live in one process; each rank's thread uses comm(rank). Reductions sum in rank
// order, so results are deterministic.
class LocalHostGroup {
 public:
  explicit LocalHostGroup(int size);
  ~LocalHostGroup();
  HostComm& comm(int rank);
  int size() const { return size_; }

 private:
  class Member;
  friend class Member;
  int size_;
  std::barrier<> barrier_;
  std::vector<const double*> send_;
  std::vector<double*> recv_;
  std::vector<Member*> members_;
};

}  // namespace dsa
