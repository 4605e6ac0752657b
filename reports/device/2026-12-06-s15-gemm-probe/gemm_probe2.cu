// Probe 2: dense sweep of K for dW = Σ_g a[g]ᵀ b[g]: bf16 default vs pedantic, fp32 Sgemm, fp64 Dgemm.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#define CK(x) do { auto e_ = (x); if (e_ != 0) { printf("error %d at %s:%d\n", (int)e_, __FILE__, __LINE__); exit(1); } } while (0)

int main(int argc, char** argv) {
  cublasHandle_t h; CK(cublasCreate(&h));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::map<std::string, int> wrong, tried;
  auto run = [&](int M, int N, int H, int64_t T) {
    // a: [T, H, M], b: [T, H, N]; only rows 0, T/2, T-2, T-1 non-zero (values bf16-exact).
    std::vector<int64_t> rows = {0, T / 2, std::max<int64_t>(0, T - 2), T - 1};
    std::vector<float> a(T * H * M, 0.f), b(T * H * N, 0.f);
    for (auto r : rows) {
      for (int64_t k = 0; k < H * M; ++k) a[r * H * M + k] = __bfloat162float(__float2bfloat16(nd(rng)));
      for (int64_t k = 0; k < H * N; ++k) b[r * H * N + k] = __bfloat162float(__float2bfloat16(nd(rng)));
    }
    std::vector<double> ref(H * M * N, 0.0);
    std::vector<int64_t> uniq(rows.begin(), rows.end());
    std::sort(uniq.begin(), uniq.end()); uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
    for (int hh = 0; hh < H; ++hh)
      for (auto g : uniq) for (int m = 0; m < M; ++m) for (int n = 0; n < N; ++n)
        ref[(hh * M + m) * N + n] += double(a[(g * H + hh) * M + m]) * b[(g * H + hh) * N + n];
    std::vector<__nv_bfloat16> ab(a.size()), bb(b.size());
    for (size_t i = 0; i < a.size(); ++i) ab[i] = __float2bfloat16(a[i]);
    for (size_t i = 0; i < b.size(); ++i) bb[i] = __float2bfloat16(b[i]);
    std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end());
    void *da, *db, *dc;
    CK(cudaMalloc(&da, a.size() * 8)); CK(cudaMalloc(&db, b.size() * 8)); CK(cudaMalloc(&dc, ref.size() * 8));
    auto check = [&](const char* name, bool dbl) {
      CK(cudaDeviceSynchronize());
      std::vector<double> got(ref.size());
      if (dbl) CK(cudaMemcpy(got.data(), dc, got.size() * 8, cudaMemcpyDeviceToHost));
      else { std::vector<float> f(ref.size()); CK(cudaMemcpy(f.data(), dc, f.size() * 4, cudaMemcpyDeviceToHost)); for (size_t i = 0; i < f.size(); ++i) got[i] = f[i]; }
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(got[i] - ref[i]));
      if (!(worst < 1e-3)) wrong[name]++, printf("M %3d N %3d H %3d T %6lld %-12s WRONG (max err %.3g)\n", M, N, H, (long long)T, name, worst);
      tried[name]++;
    };
    const float one = 1, zero = 0; const double oned = 1, zerod = 0;
    CK(cudaMemcpy(da, ab.data(), ab.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, bb.data(), bb.size() * 2, cudaMemcpyHostToDevice));
    for (auto [name, ct] : {std::pair{"bf16", CUBLAS_COMPUTE_32F}, std::pair{"bf16-pedantic", CUBLAS_COMPUTE_32F_PEDANTIC}}) {
      CK(cudaMemset(dc, 0xFF, ref.size() * 4));
      CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, N, M, T, &one, db, CUDA_R_16BF, H * N, N, da,
                                    CUDA_R_16BF, H * M, M, &zero, dc, CUDA_R_32F, N, (int64_t)M * N, H, ct,
                                    CUBLAS_GEMM_DEFAULT));
      check(name, false);
    }
    CK(cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dc, 0xFF, ref.size() * 4));
    CK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, N, M, T, &one, (float*)db, H * N, N, (float*)da, H * M, M,
                                 &zero, (float*)dc, N, (int64_t)M * N, H));
    check("sgemm", false);
    CK(cudaMemcpy(da, ad.data(), ad.size() * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, bd.data(), bd.size() * 8, cudaMemcpyHostToDevice));
    CK(cudaMemset(dc, 0xFF, ref.size() * 8));
    CK(cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, N, M, T, &oned, (double*)db, H * N, N, (double*)da, H * M,
                                 M, &zerod, (double*)dc, N, (int64_t)M * N, H));
    check("dgemm", true);
    cudaFree(da); cudaFree(db); cudaFree(dc);
  };
  // Dense K sweep at small widths, one head.
  for (auto [M, N] : {std::pair{16, 8}, std::pair{8, 8}})
    for (int64_t T = 1; T <= 9000; T += (T < 1100 ? 1 : 1)) run(M, N, 1, T);
  // Production widths near multiples of 1024, heads 1, 4, 64.
  for (int H : {1, 4, 64})
    for (int k : {1, 2, 3, 4, 5, 8, 9, 16, 32, 64})
      for (int d : {-1, 0, 1, 2, 3}) {
        if (H == 64 && k > 8) continue;
        run(128, 512, H, int64_t(k) * 1024 + d);
      }
  for (auto& [n, c] : tried) printf("%-14s %d of %d wrong\n", n.c_str(), wrong[n], c);
  return 0;
}
