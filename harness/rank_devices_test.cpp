// The GPU choice of `--backend cuda --comm mpi` (harness/rank_devices.hpp), without MPI or a GPU:
// the local rank from mpirun's or srun's environment, the device as local rank modulo the devices
// seen, and the refusals every rank reaches from the same gathered list.
#include "harness/rank_devices.hpp"

#include <map>
#include <string>

#include <gtest/gtest.h>

#include "core/errors.hpp"

namespace dsa {
namespace {

std::map<std::string, std::string> g_env;
const char* fake_getenv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

TEST(RankDevices, LocalRankFromOpenMpiThenSlurmElseNone) {
  g_env = {};
  EXPECT_EQ(launcher_local_rank(fake_getenv), std::nullopt);
  g_env = {{"SLURM_LOCALID", "3"}};
  EXPECT_EQ(launcher_local_rank(fake_getenv), 3);
  g_env = {{"SLURM_LOCALID", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}};  // mpirun inside an allocation
  EXPECT_EQ(launcher_local_rank(fake_getenv), 1);
  g_env = {{"OMPI_COMM_WORLD_LOCAL_RANK", ""}, {"SLURM_LOCALID", "2"}};
  EXPECT_EQ(launcher_local_rank(fake_getenv), 2);
  for (const char* bad : {"x", "-1", "1.5", "2 "}) {
    g_env = {{"SLURM_LOCALID", bad}};
    try {
      launcher_local_rank(fake_getenv);
      ADD_FAILURE() << bad;
    } catch (const InvalidInput& e) {
      EXPECT_EQ(e.field, "SLURM_LOCALID");
    }
  }
}

TEST(RankDevices, DeviceIsLocalRankModuloDevices) {
  EXPECT_EQ(device_of_local_rank(0, 8), 0);
  EXPECT_EQ(device_of_local_rank(5, 8), 5);
  EXPECT_EQ(device_of_local_rank(9, 8), 1);
  EXPECT_EQ(device_of_local_rank(3, 1), 0);  // srun --gpus-per-task=1: each rank sees its own GPU only
  EXPECT_EQ(device_of_local_rank(0, 0), -1);
}

RankDevice dev(int rank, int node, int devices, int device, std::string pci) {
  return RankDevice{rank, node, "node" + std::to_string(node), devices, device, std::move(pci), "NVIDIA H200 (sm_90)"};
}

TEST(RankDevices, OneRankPerGpuOnEveryNodePasses) {
  // Two nodes of two GPUs; and srun's one visible GPU per task (device 0 everywhere, distinct PCI).
  EXPECT_NO_THROW(check_rank_devices({dev(0, 0, 2, 0, "0000:01:00.0"), dev(1, 0, 2, 1, "0000:02:00.0"),
                                      dev(2, 2, 2, 0, "0000:01:00.0"), dev(3, 2, 2, 1, "0000:02:00.0")}));
  EXPECT_NO_THROW(check_rank_devices({dev(0, 0, 1, 0, "0000:01:00.0"), dev(1, 0, 1, 0, "0000:02:00.0")}));
  EXPECT_EQ(describe(dev(1, 0, 2, 1, "0000:02:00.0")), "rank 1: host node0, cuda:1 (0000:02:00.0, NVIDIA H200 (sm_90))");
}

TEST(RankDevices, MoreRanksOnANodeThanGpusIsRefusedNamingTheRule) {
  try {
    check_rank_devices({dev(0, 0, 1, 0, "0000:01:00.0"), dev(1, 0, 1, 0, "0000:01:00.0")});
    ADD_FAILURE() << "two ranks on one GPU passed";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(e.field, "-np");
    const std::string m = e.what();
    EXPECT_NE(m.find("NCCL cannot put two ranks on one GPU"), std::string::npos) << m;
    EXPECT_NE(m.find("ranks 0 and 1 on host node0"), std::string::npos) << m;
    EXPECT_NE(m.find("at most one rank per GPU"), std::string::npos) << m;
  }
  // Without PCI addresses the device numbers stand for the GPUs.
  EXPECT_THROW(check_rank_devices({dev(0, 0, 2, 0, ""), dev(1, 0, 2, 1, ""), dev(2, 0, 2, 0, "")}), InvalidInput);
  // The same GPU numbers on two nodes are two GPUs.
  EXPECT_NO_THROW(check_rank_devices({dev(0, 0, 1, 0, "0000:01:00.0"), dev(1, 1, 1, 0, "0000:01:00.0")}));
}

TEST(RankDevices, ARankWithoutADeviceCannotRun) {
  try {
    check_rank_devices({dev(0, 0, 1, 0, "0000:01:00.0"), dev(1, 1, 0, -1, "")});
    ADD_FAILURE() << "a rank without a device passed";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 (host node1) sees no CUDA device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsa
