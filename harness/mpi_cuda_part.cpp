// The cuda backend's RankPart under `--comm mpi` (mpi_rank_part.hpp): one process per CP rank and
// per GPU. At the start every rank picks its GPU (local rank modulo the devices it sees) and the
// choices are gathered, so that a node with more ranks than GPUs is refused the same way on every
// rank (NCCL cannot put two ranks on one GPU). The NCCL communicator is bootstrapped over MPI at
// the first case (rank 0's ncclGetUniqueId, MPI_Bcast, ncclCommInitRank), inside the case so that
// rank 0's deadline covers it, and reused by every later case of the run.
#include "harness/mpi_rank_part.hpp"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "core/errors.hpp"
#include "harness/generate.hpp"
#include "reference/comm_mpi.hpp"

#if defined(DSA_HAVE_CUDA) && defined(DSA_HAVE_NCCL)
#include <cuda_runtime.h>

#include "fused/comm/comm.hpp"
#include "fused/device.hpp"
#include "fused/run.hpp"
#endif

namespace dsa::mpi {

#if defined(DSA_HAVE_CUDA) && defined(DSA_HAVE_NCCL)
namespace {

// A DeviceComm that reports each collective to the session (progress notes name the rank the
// others wait for) and waits for it on its stream before it says it left: an NCCL call returns at
// once, the hang of a missing peer shows in the stream, so the wait belongs inside the collective.
class ObservedComm final : public fused::DeviceComm {
 public:
  ObservedComm(fused::DeviceComm& inner, const CollectiveObserver& observer, std::atomic<int64_t>& entered)
      : in_(inner), observer_(observer), entered_(entered) {}
  int rank() const override { return in_.rank(); }
  int size() const override { return in_.size(); }
  int device() const override { return in_.device(); }
  std::string kind() const override { return in_.kind(); }
  void allgather(const void* send, void* recv, size_t bytes, cudaStream_t s) override {
    scoped("allgather", s, [&] { in_.allgather(send, recv, bytes, s); });
  }
  void reduce_scatter(const float* send, float* recv, size_t count, cudaStream_t s) override {
    scoped("reduce-scatter", s, [&] { in_.reduce_scatter(send, recv, count, s); });
  }
  void allreduce_sum(float* buf, size_t count, cudaStream_t s) override {
    scoped("all-reduce", s, [&] { in_.allreduce_sum(buf, count, s); });
  }
  void abort() override { in_.abort(); }

 private:
  template <class F>
  void scoped(const char* what, cudaStream_t s, F f) {
    const int64_t n = ++entered_;
    if (observer_) observer_(n, what, true);
    f();
    const cudaError_t e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) throw std::runtime_error(std::string("NCCL ") + what + ": " + cudaGetErrorString(e));
    if (observer_) observer_(n, what, false);
  }
  fused::DeviceComm& in_;
  const CollectiveObserver& observer_;
  std::atomic<int64_t>& entered_;
};

class CudaPart final : public RankPart {
 public:
  CudaPart(int rank, int world, int device, std::vector<std::string> devices)
      : rank_(rank), world_(world), device_(device), devices_(std::move(devices)) {}

  RankCase generate(const Case& c, int rank) const override {
    validate(c.problem);
    StreamLayout L = make_layout(c.problem.seqlens, c.problem.cp, c.problem.pad_rows);
    Inputs shard = generate_rank_inputs(c, rank);
    return RankCase{c.problem, std::move(L), std::move(shard), injected_indices(c)};
  }
  RankCase take(const PreparedCase& pc, int rank) const override {
    return RankCase{pc.problem, pc.layout, shard_inputs(pc.inputs, pc.layout.rank_rows.at(rank)), pc.injected};
  }
  bool sharded() const override { return true; }
  RankResult run(const RankCase& rc) override {
    const cudaError_t e = cudaSetDevice(device_);  // this thread's device (rank 0 runs its part on a thread)
    if (e != cudaSuccess) throw std::runtime_error(std::string("cudaSetDevice: ") + cudaGetErrorString(e));
    if (!nccl_) bootstrap();
    ObservedComm comm(*nccl_, observer_, entered_);
    fused::FusedOptions opt;
    opt.attention_indices = rc.injected;
    return fused::run_fused_rank(rc.problem, rc.layout, rc.inputs, opt, comm);
  }
  void observe(CollectiveObserver f) override { observer_ = std::move(f); }
  int64_t entered() const override { return entered_; }
  std::string refuses(const PreparedCase& pc) const override {
    if (pc.problem.path == Path::explicit_)
      return "the fused cuda path implements the absorbed path only (path = explicit is not supported)";
    return "";
  }
  std::vector<Path> paths() const override { return {Path::absorbed}; }
  std::vector<std::string> deterministic() const override { return cuda_deterministic_tensors(); }
  void abort() override {
    if (fused::DeviceComm* c = live_.load()) c->abort();  // ncclCommAbort: a stuck collective returns
  }
  std::vector<std::string> devices() const override { return devices_; }

 private:
  // One collective of its own in the progress notes: a rank that never joins is named.
  void bootstrap() {
    const int64_t n = ++entered_;
    if (observer_) observer_(n, "nccl bootstrap", true);
    std::string id(128, '\0');  // NCCL_UNIQUE_ID_BYTES
    if (rank_ == 0) id = fused::nccl_unique_id();
    require(id.size() == 128, "nccl", "the NCCL unique id is not 128 bytes");
    mpi_check(MPI_Bcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast (NCCL unique id)");
    nccl_ = fused::make_nccl_rank(id, rank_, world_, device_);
    live_ = nccl_.get();
    if (observer_) observer_(n, "nccl bootstrap", false);
  }

  int rank_, world_, device_;
  std::vector<std::string> devices_;
  std::unique_ptr<fused::DeviceComm> nccl_;  // created at the first case, reused by the others
  std::atomic<fused::DeviceComm*> live_{nullptr};
  CollectiveObserver observer_;
  std::atomic<int64_t> entered_{0};
};

// What a rank tells the others of its device: fixed-size, so that one MPI_Allgather moves it.
struct DeviceRecord {
  int node = 0, devices = 0, device = -1;
  char host[64] = {0}, pci[32] = {0}, name[96] = {0};
};

void copy_to(char* dst, size_t n, const std::string& s) { std::strncpy(dst, s.c_str(), n - 1); }

}  // namespace

std::unique_ptr<RankPart> make_cuda_part() {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // errors are the case's, not an abort
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // The node: the ranks sharing memory with this one; its lowest world rank names it.
  MPI_Comm local;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
  int local_rank = 0, node = rank;
  MPI_Comm_rank(local, &local_rank);
  mpi_check(MPI_Allreduce(&rank, &node, 1, MPI_INT, MPI_MIN, local), "MPI_Allreduce (node)");
  MPI_Comm_free(&local);
  // The launcher's word first (mpirun, srun), MPI's otherwise. A malformed variable is refused on
  // the ranks that have it; the gather below still runs on every rank, so none is left waiting.
  std::string bad_env;
  try {
    local_rank = launcher_local_rank().value_or(local_rank);
  } catch (const InvalidInput& e) {
    bad_env = e.what();
  }
  DeviceRecord mine;
  mine.node = node;
  mine.devices = fused::device_count();
  mine.device = device_of_local_rank(local_rank, mine.devices);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  copy_to(mine.host, sizeof mine.host, host);
  if (mine.device >= 0) {
    copy_to(mine.pci, sizeof mine.pci, fused::device_pci_bus_id(mine.device));
    copy_to(mine.name, sizeof mine.name, fused::device_name(mine.device) + " (" + fused::device_arch(mine.device) + ")");
  }
  if (!bad_env.empty()) mine.devices = -1;  // tells every rank to refuse
  std::vector<DeviceRecord> all(world);
  mpi_check(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD),
            "MPI_Allgather (devices)");
  for (int r = 0; r < world; ++r)
    if (all[r].devices < 0)
      throw InvalidInput("--comm", "mpi: rank " + std::to_string(r) + " (host " + all[r].host +
                                       ") has a malformed local rank in its environment" +
                                       (r == rank ? ": " + bad_env : std::string()));
  std::vector<RankDevice> ranks(world);
  std::vector<std::string> described;
  for (int r = 0; r < world; ++r) {
    ranks[r] = RankDevice{r, all[r].node, all[r].host, all[r].devices, all[r].device, all[r].pci, all[r].name};
    described.push_back(describe(ranks[r]));
  }
  check_rank_devices(ranks);  // the same list on every rank: the same verdict on every rank
  const cudaError_t e = cudaSetDevice(mine.device);  // the main thread's too (the GPU oracle runs there)
  if (e != cudaSuccess) throw Unavailable(std::string("cudaSetDevice: ") + cudaGetErrorString(e));
  return std::make_unique<CudaPart>(rank, world, mine.device, std::move(described));
}

#else

std::unique_ptr<RankPart> make_cuda_part() {
  throw InvalidInput("--comm", "mpi with backend cuda needs CUDA and NCCL in the build (one process per GPU, NCCL "
                               "bootstrapped over MPI); this build has " +
                                   std::string(
#ifdef DSA_HAVE_CUDA
                                       "no NCCL (nccl.h and libnccl were not found at configure time)"
#else
                                       "no CUDA"
#endif
                                       ));
}

#endif

}  // namespace dsa::mpi
