// The device communicators: the local group (several ranks on one GPU) and NCCL at world size 1.
// Values are small integers, so every sum is exact and any order gives the same bits.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "fused/comm/comm.hpp"
#include "fused/device.hpp"

namespace dsa::fused {
namespace {

// Every rank: allgather its [n] block, reduce-scatter a [size·n] buffer, all-reduce a [m] buffer.
void exercise(CommGroup& g, int n) {
  const int P = g.size();
  std::vector<std::thread> th;
  std::vector<std::string> errors(P);
  for (int r = 0; r < P; ++r)
    th.emplace_back([&, r] {
      DeviceComm& c = g.comm(r);
      cudaSetDevice(c.device());
      cudaStream_t s;
      cudaStreamCreate(&s);
      std::vector<float> mine(n), all(P * n), scatter_in(P * n), scatter_out(n), ar(3 * n);
      for (int i = 0; i < n; ++i) mine[i] = float(1000 * r + i);
      for (int i = 0; i < P * n; ++i) scatter_in[i] = float(r + 1) * float(i % 97);
      for (int i = 0; i < 3 * n; ++i) ar[i] = float(r * 3 + i % 5);
      float *d_mine, *d_all, *d_si, *d_so, *d_ar;
      cudaMalloc(&d_mine, n * 4);
      cudaMalloc(&d_all, P * n * 4);
      cudaMalloc(&d_si, P * n * 4);
      cudaMalloc(&d_so, n * 4);
      cudaMalloc(&d_ar, 3 * n * 4);
      cudaMemcpy(d_mine, mine.data(), n * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(d_si, scatter_in.data(), P * n * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(d_ar, ar.data(), 3 * n * 4, cudaMemcpyHostToDevice);
      c.allgather(d_mine, d_all, n * 4, s);
      c.reduce_scatter(d_si, d_so, n, s);
      c.allreduce_sum(d_ar, 3 * n, s);
      cudaStreamSynchronize(s);
      cudaMemcpy(all.data(), d_all, P * n * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(scatter_out.data(), d_so, n * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(ar.data(), d_ar, 3 * n * 4, cudaMemcpyDeviceToHost);
      std::string& e = errors[r];
      const float ranks_sum = float(P * (P + 1) / 2);
      for (int q = 0; q < P && e.empty(); ++q)
        for (int i = 0; i < n; ++i)
          if (all[q * n + i] != float(1000 * q + i)) { e = "allgather"; break; }
      for (int i = 0; i < n && e.empty(); ++i)
        if (scatter_out[i] != ranks_sum * float((r * n + i) % 97)) e = "reduce_scatter";
      for (int i = 0; i < 3 * n && e.empty(); ++i)
        if (ar[i] != float(3 * P * (P - 1) / 2 + P * (i % 5))) e = "allreduce";
      for (float* p : {d_mine, d_all, d_si, d_so, d_ar}) cudaFree(p);
      cudaStreamDestroy(s);
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < P; ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " wrong result of " << errors[r];
}

TEST(LocalComm, SeveralRanksOnOneGpu) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device: the device communicators run only on a GPU";
  for (int P : {1, 2, 3, 4, 8}) {
    auto g = make_local_group(P, 0);
    exercise(*g, 1000 + P);
    exercise(*g, 7);  // reuse of the same group
  }
}

TEST(NcclComm, WorldSizeOne) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device: the device communicators run only on a GPU";
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  auto g = make_nccl_group(1);
  exercise(*g, 513);
}

// The cache of fused/comm/comm.hpp: a group given back is the one handed out next time (no new
// ncclCommInitAll), and a group in use is never handed out twice.
TEST(NcclComm, GroupsAreReusedAcrossRuns) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device: the device communicators run only on a GPU";
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  auto a = take_nccl_group(1);
  CommGroup* first = a.get();
  const int64_t created = nccl_groups_created();
  give_back_nccl_group(std::move(a));
  auto b = take_nccl_group(1);
  EXPECT_EQ(b.get(), first);
  EXPECT_EQ(nccl_groups_created(), created);
  auto c = take_nccl_group(1);  // b is in use: a second group
  EXPECT_NE(c.get(), b.get());
  EXPECT_EQ(nccl_groups_created(), created + 1);
  give_back_nccl_group(std::move(b));
  give_back_nccl_group(std::move(c));
}

TEST(NcclComm, RefusesMoreRanksThanGpus) {
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  EXPECT_ANY_THROW(make_nccl_group(device_count() + 1));
}

}  // namespace
}  // namespace dsa::fused
