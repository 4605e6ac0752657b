// Which GPU each rank of `--backend cuda --comm mpi` runs on, and the refusals when that cannot
// work (README "One process per CP rank"). MPI-free: the session (mpi_cuda_part.cpp) gathers one
// RankDevice per rank over MPI and every rank then decides the same from the same list, so a
// refusal is the same error on every rank and none waits for another that gave up.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dsa {

// The rank's index among the ranks of its node, as the launcher says: Open MPI's mpirun
// (OMPI_COMM_WORLD_LOCAL_RANK), else Slurm's srun (SLURM_LOCALID); nullopt when neither is set
// (the caller then asks MPI: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)). A value that is not a
// number >= 0 is InvalidInput naming the variable. getenv is the environment lookup (tests).
std::optional<int> launcher_local_rank(const char* (*getenv)(const char*) = nullptr);

// The device of a rank: its local rank modulo the devices it sees (-1 when it sees none). Under
// Slurm's --gpus-per-task a rank may see only its own GPU (device 0 of 1): that is still right,
// since the refusal below compares physical GPUs (PCI addresses), not device numbers.
int device_of_local_rank(int local_rank, int device_count);

struct RankDevice {
  int rank = 0;
  int node = 0;          // the lowest world rank on its node: equal for ranks sharing a node
  std::string host;
  int devices = 0;       // CUDA devices it sees
  int device = -1;       // the one it chose
  std::string pci;       // that device's PCI address (the physical GPU)
  std::string name;      // "NVIDIA H200 (sm_90)"
};

// "rank 1: host gpu7, cuda:1 (0000:3b:00.0, NVIDIA H200 (sm_90))": the report's context.rank_devices.
std::string describe(const RankDevice& d);

// Every rank's device, ranks in order. Throws Unavailable (exit 3) when a rank sees no CUDA device,
// and InvalidInput("-np", ...) (exit 2) when two ranks of one node would share a GPU: NCCL
// cannot put two ranks on one GPU, so a node may run at most as many ranks as it has GPUs.
void check_rank_devices(const std::vector<RankDevice>& ranks);

}  // namespace dsa
