// The CP communicator of the fused path (DESIGN.md "Fused kernels and communication"): the three
// collectives the DSA core needs, on device buffers, stream-ordered. Two implementations: NCCL
// (one rank per GPU) and a local group that runs several ranks on ONE GPU (NCCL refuses that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

namespace dsa::fused {

class DeviceComm {
 public:
  virtual ~DeviceComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int device() const = 0;   // the CUDA device this rank runs on
  virtual std::string kind() const = 0;  // "nccl" | "local"
  // recv[r·bytes : (r+1)·bytes] = send of rank r (raw bytes, any element type).
  virtual void allgather(const void* send, void* recv, size_t bytes, cudaStream_t s) = 0;
  // recv (count floats) = Σ_r send_r[rank·count : (rank+1)·count].
  virtual void reduce_scatter(const float* send, float* recv, size_t count, cudaStream_t s) = 0;
  // buf = Σ_r buf_r, in place.
  virtual void allreduce_sum(float* buf, size_t count, cudaStream_t s) = 0;
  // Marks the group broken so that ranks waiting in a collective throw instead of hanging.
  virtual void abort() {}
};

// A group of ranks of one process; each rank's host thread uses comm(rank).
class CommGroup {
 public:
  virtual ~CommGroup() = default;
  virtual int size() const = 0;
  virtual DeviceComm& comm(int rank) = 0;
};

// Several ranks on one device: one host thread per rank, device-to-device copies between the
// ranks' buffers and a host barrier. Reductions add in rank order, so they are deterministic.
std::unique_ptr<CommGroup> make_local_group(int size, int device = 0);

// NCCL, one rank per GPU (devices 0 … size−1), one host thread per rank (ncclCommInitAll).
// Throws dsa::Unavailable when built without NCCL or with fewer devices than ranks.
std::unique_ptr<CommGroup> make_nccl_group(int size);
bool nccl_available();
// The NCCL library's version at run time ("2.27.3"), or "not built".
std::string nccl_version();

// NCCL with one process per rank (`--comm mpi`), bootstrapped by the caller as nccl-tests does:
// rank 0 makes the unique id (nccl_unique_id: ncclGetUniqueId's opaque bytes), the caller sends it
// to every rank (MPI_Bcast; fused/ knows nothing of MPI), and each rank joins with make_nccl_rank
// (ncclCommInitRank on `device`, which waits until all `size` ranks have joined). abort() is
// ncclCommAbort: it releases a rank stuck in a collective whose peer will never come. Both throw
// dsa::Unavailable when built without NCCL, std::runtime_error when NCCL fails.
std::string nccl_unique_id();
std::unique_ptr<DeviceComm> make_nccl_rank(const std::string& unique_id, int rank, int size, int device);

// Reuse of NCCL groups across cases (ncclCommInitAll costs tens to hundreds of milliseconds, more
// than a small case's kernels): take_nccl_group hands out a cached group of this world size (on
// devices 0 … size−1) or makes one; give_back_nccl_group returns a group whose run finished
// cleanly to the cache. A group whose run failed (abort() was called) is destroyed by the caller,
// never given back. A group in use is not shared: a concurrent run of the same size makes its own.
// Cached groups live until the process exits (never destroyed at static destruction, when the
// CUDA runtime may already be gone).
std::unique_ptr<CommGroup> take_nccl_group(int size);
void give_back_nccl_group(std::unique_ptr<CommGroup> group);
// How many NCCL groups this process has created (make_nccl_group or a cache miss): tests.
int64_t nccl_groups_created();

}  // namespace dsa::fused
