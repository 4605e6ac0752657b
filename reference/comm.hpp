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

// out[i] = Σ_r part(r)[i] over r = 0 … ranks−1, added in rank order starting from 0.0. Every
// HostComm reduces this way (never with a library's reduction, whose order is unspecified), so a
// reduction gives the same bits on every communicator and every run.
template <class Part>
void sum_in_rank_order(int ranks, int64_t count, Part part, double* out) {
  for (int64_t i = 0; i < count; ++i) {
    double s = 0;
    for (int r = 0; r < ranks; ++r) s += part(r)[i];
    out[i] = s;
  }
}

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
