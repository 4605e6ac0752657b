#include "harness/rank_devices.hpp"

#include <cstdlib>
#include <map>

#include "core/errors.hpp"
#include "harness/text.hpp"

namespace dsa {

std::optional<int> launcher_local_rank(const char* (*getenv)(const char*)) {
  auto get = [&](const char* name) -> const char* { return getenv ? getenv(name) : std::getenv(name); };
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* v = get(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    require(*end == '\0' && n >= 0 && n < (1 << 24), name, "must be a rank number >= 0, got " + text::quoted(v));
    return static_cast<int>(n);
  }
  return std::nullopt;
}

int device_of_local_rank(int local_rank, int device_count) {
  return device_count > 0 ? local_rank % device_count : -1;
}

std::string describe(const RankDevice& d) {
  std::string s = "rank " + std::to_string(d.rank) + ": host " + d.host + ", ";
  if (d.device < 0) return s + "no CUDA device";
  return s + "cuda:" + std::to_string(d.device) + " (" + (d.pci.empty() ? "?" : d.pci) + ", " + d.name + ")";
}

void check_rank_devices(const std::vector<RankDevice>& ranks) {
  for (const RankDevice& d : ranks)
    if (d.devices <= 0 || d.device < 0)
      throw Unavailable("--backend cuda --comm mpi: rank " + std::to_string(d.rank) + " (host " + d.host +
                        ") sees no CUDA device; every rank needs a GPU of its own");
  // Per node: the ranks on it and the GPUs they chose, by physical address.
  std::map<int, std::vector<const RankDevice*>> nodes;
  for (const RankDevice& d : ranks) nodes[d.node].push_back(&d);
  for (auto& [node, on] : nodes) {
    std::map<std::string, const RankDevice*> owner;
    for (const RankDevice* d : on) {
      // No PCI address (unknown): the device number on the node stands for it.
      const std::string gpu = d->pci.empty() ? "cuda:" + std::to_string(d->device) : d->pci;
      auto [it, fresh] = owner.emplace(gpu, d);
      if (fresh) continue;
      throw InvalidInput(
          "-np", "NCCL cannot put two ranks on one GPU: ranks " + std::to_string(it->second->rank) + " and " +
                     std::to_string(d->rank) + " on host " + d->host + " would share GPU " + gpu + " (the node runs " +
                     std::to_string(on.size()) + " ranks but they see " + std::to_string(d->devices) +
                     " GPU(s)); run at most one rank per GPU on each node (mpirun -np N with N <= the GPUs, or srun "
                     "--ntasks-per-node=N --gpus-per-task=1)");
    }
  }
}

}  // namespace dsa
