// Stand-alone timing of the indexer + top-k and the indexer loss kernels (not part of the CMake
// build; `dsa-parity bench` is the project's benchmark). Built by hand on the device machine:
//   nvcc -std=c++17 -O3 -I. -gencode arch=compute_90a,code=sm_90a fused/indexer_bench/bench.cu \
//        fused/indexer_topk.cu fused/loss_kl.cu fused/device.cu -o bench
// CUDA events after warm-up; TFLOP/s from the README formulas over causal-valid pairs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fused/api.cuh"
#include "fused/cuda_check.hpp"

using dsa::fused::bf16;

__global__ void fill_random(bf16* p, size_t n, float scale, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
    p[i] = __float2bfloat16(scale * ((x & 0xffff) / 32768.f - 1.f));
  }
}

template <class T>
T* dalloc(size_t n) {
  T* p = nullptr;
  DSA_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T) + 16));
  return p;
}
bf16* drand(size_t n, float scale, uint32_t seed) {
  bf16* p = dalloc<bf16>(n);
  fill_random<<<1024, 256>>>(p, n, scale, seed);
  return p;
}

template <class F>
float time_ms(F&& f, int warm, int iters) {
  for (int i = 0; i < warm; ++i) f();
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < iters; ++i) f();
  cudaEventRecord(b);
  DSA_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms / iters;
}

int main(int argc, char** argv) {
  const char* shape = argc > 1 ? argv[1] : "dsv32";
  const int S = argc > 2 ? atoi(argv[2]) : 4096;
  const bool glm = shape[0] == 'g';
  const int H = glm ? 64 : 128, HI = glm ? 32 : 64, DI = 128, C = 512, R = 64, K = 2048;
  const int Tq = S, Tp = S;
  std::vector<int32_t> hb(S, 0), he(S), hg(S);
  double pairs = 0, sparse_pairs = 0;
  for (int g = 0; g < S; ++g) he[g] = g + 1, hg[g] = g, pairs += g + 1, sparse_pairs += std::min(g + 1, K);
  int32_t *rb = dalloc<int32_t>(S), *re = dalloc<int32_t>(S), *rg = dalloc<int32_t>(S);
  cudaMemcpy(rb, hb.data(), S * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(re, he.data(), S * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(rg, hg.data(), S * 4, cudaMemcpyHostToDevice);
  dsa::fused::RowRanges rows{rg, rb, re};
  bf16 *q_I = drand(size_t(Tq) * HI * DI, 0.09f, 1), *w = drand(size_t(Tq) * HI, 1.f, 2), *k_I = drand(size_t(Tp) * DI, 1.f, 3);
  int32_t* topk = dalloc<int32_t>(size_t(Tq) * K);
  dsa::fused::IndexerArgs ia{q_I, w, k_I, rows, Tq, Tp, HI, DI, K, true, topk, nullptr};
  const float ms_i = time_ms([&] { dsa::fused::indexer_topk(ia, nullptr); }, 2, 5);
  const double fl_i = 2.0 * HI * DI * pairs;
  printf("{\"kernel\":\"indexer_topk\",\"shape\":\"%s\",\"S\":%d,\"K\":%d,\"ms\":%.4f,\"tflops\":%.2f}\n", shape, S, K, ms_i,
         fl_i / ms_i * 1e-9);

  // Sparse loss over the indexer's own top-k; lse = 30 keeps every A_h finite.
  bf16 *Qt = drand(size_t(Tq) * H * (C + R), 1.f, 4), *c = drand(size_t(Tp) * C, 1.f, 5), *kpe = drand(size_t(Tp) * R, 1.f, 6);
  std::vector<float> hl(size_t(Tq) * H, 30.f);
  float* lse = dalloc<float>(hl.size());
  cudaMemcpy(lse, hl.data(), hl.size() * 4, cudaMemcpyHostToDevice);
  uint8_t* counted = dalloc<uint8_t>(S);
  cudaMemset(counted, 1, S);
  float *kl = dalloc<float>(Tq), *dq = dalloc<float>(size_t(Tq) * HI * DI), *dk = dalloc<float>(size_t(Tp) * DI),
        *dw = dalloc<float>(size_t(Tq) * HI);
  dsa::fused::LossArgs la{Qt, c, kpe, lse, topk, q_I, w, k_I, rows, Tq, Tp, H, C, R, HI, DI, K,
                          0.0416f, true, false, 1.f / S, counted, kl, dq, dk, dw};
  const float ms_s = time_ms([&] { dsa::fused::indexer_loss(la, nullptr); }, 1, 3);
  const double per_pair = 2.0 * H * (C + R) + 3 * 2.0 * HI * DI;  // logits, u, dq_I, dk_I once each
  printf("{\"kernel\":\"indexer_loss_sparse\",\"shape\":\"%s\",\"S\":%d,\"K\":%d,\"ms\":%.4f,\"tflops\":%.2f}\n", shape, S,
         K, ms_s, per_pair * sparse_pairs / ms_s * 1e-9);
  {  // run-to-run spread of dk_I (fp32 atomics) and bitwise repeatability of dq_I, dw, kl
    auto grab = [&](const float* d, size_t n) {
      std::vector<float> h(n);
      cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost);
      return h;
    };
    dsa::fused::indexer_loss(la, nullptr);
    auto dk1 = grab(dk, size_t(Tp) * DI), dq1 = grab(dq, size_t(Tq) * HI * DI);
    dsa::fused::indexer_loss(la, nullptr);
    auto dk2 = grab(dk, size_t(Tp) * DI), dq2 = grab(dq, size_t(Tq) * HI * DI);
    double mx = 0, md = 0;
    size_t ndiff = 0, nq = 0;
    for (size_t e = 0; e < dk1.size(); ++e) {
      mx = std::max(mx, double(std::fabs(dk1[e])));
      md = std::max(md, double(std::fabs(dk1[e] - dk2[e])));
      ndiff += dk1[e] != dk2[e];
    }
    for (size_t e = 0; e < dq1.size(); ++e) nq += dq1[e] != dq2[e];
    printf("{\"kernel\":\"indexer_loss_sparse\",\"shape\":\"%s\",\"S\":%d,\"dk_I_elements_differing\":%zu,"
           "\"dk_I_max_abs_diff\":%.3e,\"dk_I_max_abs\":%.3e,\"dq_I_elements_differing\":%zu}\n",
           shape, S, ndiff, md, mx, nq);
  }
  if (S <= 4096) {
    la.dense = true;
    const float ms_d = time_ms([&] { dsa::fused::indexer_loss(la, nullptr); }, 1, 2);
    printf("{\"kernel\":\"indexer_loss_dense\",\"shape\":\"%s\",\"S\":%d,\"ms\":%.4f,\"tflops\":%.2f}\n", shape, S, ms_d,
           per_pair * pairs / ms_d * 1e-9);
  }
  DSA_CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}
