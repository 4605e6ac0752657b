// NCCL communicators: one rank per GPU, one host thread per GPU in this process (ncclCommInitAll).
// Without NCCL the factory throws dsa::Unavailable.
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fused/comm/comm.hpp"
#include "fused/cuda_check.hpp"
#include "core/errors.hpp"

#ifdef DSA_HAVE_NCCL
#include <nccl.h>
#endif

namespace dsa::fused {

#ifdef DSA_HAVE_NCCL
namespace {

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}

class NcclComm final : public DeviceComm {
 public:
  NcclComm(ncclComm_t c, int rank, int size, int device) : c_(c), rank_(rank), size_(size), device_(device) {}
  ~NcclComm() override {
    if (!aborted_) ncclCommDestroy(c_);  // an aborted communicator is already freed
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const override { return device_; }
  std::string kind() const override { return "nccl"; }
  void allgather(const void* send, void* recv, size_t bytes, cudaStream_t s) override {
    nccl_check(ncclAllGather(send, recv, bytes, ncclUint8, c_, s), "ncclAllGather");
  }
  void reduce_scatter(const float* send, float* recv, size_t count, cudaStream_t s) override {
    nccl_check(ncclReduceScatter(send, recv, count, ncclFloat32, ncclSum, c_, s), "ncclReduceScatter");
  }
  void allreduce_sum(float* buf, size_t count, cudaStream_t s) override {
    nccl_check(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, c_, s), "ncclAllReduce");
  }
  void abort() override { ncclCommAbort(c_); aborted_ = true; }

 private:
  ncclComm_t c_;
  int rank_, size_, device_;
  bool aborted_ = false;
};

class NcclGroup final : public CommGroup {
 public:
  explicit NcclGroup(int size) {
    std::vector<ncclComm_t> comms(size);
    std::vector<int> devs(size);
    for (int r = 0; r < size; ++r) devs[r] = r;
    nccl_check(ncclCommInitAll(comms.data(), size, devs.data()), "ncclCommInitAll");
    for (int r = 0; r < size; ++r) members_.emplace_back(new NcclComm(comms[r], r, size, r));
  }
  int size() const override { return (int)members_.size(); }
  DeviceComm& comm(int rank) override { return *members_.at(rank); }

 private:
  std::vector<std::unique_ptr<NcclComm>> members_;
};

}  // namespace
#endif

namespace {

std::atomic<int64_t> g_created{0};

// Idle groups by (world size, first device). Leaked on purpose (see comm.hpp).
struct GroupCache {
  std::mutex m;
  std::multimap<std::pair<int, int>, std::unique_ptr<CommGroup>> idle;
};
GroupCache& cache() {
  static GroupCache* c = new GroupCache;
  return *c;
}

}  // namespace

bool nccl_available() {
#ifdef DSA_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::string nccl_version() {
#ifdef DSA_HAVE_NCCL
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess || v <= 0) return "unknown";
  // NCCL_VERSION_CODE since 2.9: major*10000 + minor*100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
#else
  return "not built";
#endif
}

std::unique_ptr<CommGroup> make_nccl_group(int size) {
#ifdef DSA_HAVE_NCCL
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  if (n < size)
    throw Unavailable("NCCL needs one GPU per rank: cp = " + std::to_string(size) + " but " +
                      std::to_string(n) + " device(s) (use --comm local)");
  auto g = std::make_unique<NcclGroup>(size);
  ++g_created;
  return g;
#else
  (void)size;
  throw Unavailable("built without NCCL (use --comm local)");
#endif
}

std::string nccl_unique_id() {
#ifdef DSA_HAVE_NCCL
  ncclUniqueId id;
  nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::string(id.internal, sizeof id.internal);
#else
  throw Unavailable("built without NCCL: --backend cuda --comm mpi needs NCCL (nccl.h and libnccl at configure time)");
#endif
}

std::unique_ptr<DeviceComm> make_nccl_rank(const std::string& unique_id, int rank, int size, int device) {
#ifdef DSA_HAVE_NCCL
  ncclUniqueId id;
  if (unique_id.size() != sizeof id.internal)
    throw std::runtime_error("make_nccl_rank: the NCCL unique id has " + std::to_string(unique_id.size()) +
                             " bytes, not " + std::to_string(sizeof id.internal));
  std::memcpy(id.internal, unique_id.data(), sizeof id.internal);
  DSA_CUDA_CHECK(cudaSetDevice(device));
  ncclComm_t c;
  nccl_check(ncclCommInitRank(&c, size, id, rank), "ncclCommInitRank");
  ++g_created;
  return std::make_unique<NcclComm>(c, rank, size, device);
#else
  (void)unique_id, (void)rank, (void)size, (void)device;
  throw Unavailable("built without NCCL: --backend cuda --comm mpi needs NCCL (nccl.h and libnccl at configure time)");
#endif
}

std::unique_ptr<CommGroup> take_nccl_group(int size) {
  {
    GroupCache& c = cache();
    std::lock_guard<std::mutex> lock(c.m);
    auto it = c.idle.find({size, 0});
    if (it != c.idle.end()) {
      std::unique_ptr<CommGroup> g = std::move(it->second);
      c.idle.erase(it);
      return g;
    }
  }
  return make_nccl_group(size);
}

void give_back_nccl_group(std::unique_ptr<CommGroup> group) {
  if (!group) return;
  const int size = group->size(), device = group->size() > 0 ? group->comm(0).device() : 0;
  GroupCache& c = cache();
  std::lock_guard<std::mutex> lock(c.m);
  c.idle.emplace(std::make_pair(size, device), std::move(group));
}

int64_t nccl_groups_created() { return g_created.load(); }

}  // namespace dsa::fused
