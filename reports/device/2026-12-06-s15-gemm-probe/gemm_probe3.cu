// Probe 3: the weight-gradient GEMM at production shapes, timed: default fp32 compute, pedantic,
// and K split into a multiple of 128 plus the remainder (beta 1); plus the split's correctness over
// a dense K sweep (only rows 0, T/2, T-2, T-1 non-zero).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#define CK(x) do { auto e_ = (x); if (e_ != 0) { printf("error %d at %s:%d\n", (int)e_, __FILE__, __LINE__); exit(1); } } while (0)

// C[h] (N×M col-major) = B[h]ᵀ-ish: dW[h, m, n] = Σ_k a[k, h, m] b[k, h, n]; a ld H·M, b ld H·N.
static void dw(cublasHandle_t h, int mode, int M, int N, int H, int64_t K, const __nv_bfloat16* a, int64_t lda,
               const __nv_bfloat16* b, int64_t ldb, float* c) {
  const float one = 1, zero = 0;
  auto call = [&](int64_t k0, int64_t kk, const float* beta, cublasComputeType_t ct) {
    CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, N, M, (int)kk, &one, b + k0 * ldb, CUDA_R_16BF, (int)ldb, N,
                                  a + k0 * lda, CUDA_R_16BF, (int)lda, M, beta, c, CUDA_R_32F, N, (int64_t)M * N, H, ct,
                                  CUBLAS_GEMM_DEFAULT));
  };
  if (mode == 0) call(0, K, &zero, CUBLAS_COMPUTE_32F);
  if (mode == 1) call(0, K, &zero, CUBLAS_COMPUTE_32F_PEDANTIC);
  if (mode == 2) {
    const int64_t K0 = K / 128 * 128;
    if (K0) call(0, K0, &zero, CUBLAS_COMPUTE_32F);
    if (K > K0) call(K0, K - K0, K0 ? &one : &zero, CUBLAS_COMPUTE_32F);
  }
}

int main() {
  cublasHandle_t h; CK(cublasCreate(&h));
  const char* names[] = {"default", "pedantic", "split128"};
  // Timing at production shapes.
  struct S { const char* what; int M, N, H, ldn; };
  for (S s : {S{"dW_UV V3.2", 128, 512, 128, 512}, S{"dW_UK V3.2", 128, 512, 128, 576}, S{"dW_UV GLM-5", 128, 512, 64, 512}})
    for (int64_t T : {4096, 16384, 65536}) {
      __nv_bfloat16 *a, *b; float* c;
      CK(cudaMalloc(&a, T * s.H * s.M * 2)); CK(cudaMalloc(&b, T * s.H * s.ldn * 2)); CK(cudaMalloc(&c, (size_t)s.H * s.M * s.N * 4));
      CK(cudaMemset(a, 0x3c, T * s.H * s.M * 2)); CK(cudaMemset(b, 0x3c, T * s.H * s.ldn * 2));
      cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
      for (int mode = 0; mode < 3; ++mode) {
        for (int w = 0; w < 2; ++w) dw(h, mode, s.M, s.N, s.H, T, a, (int64_t)s.H * s.M, b, (int64_t)s.H * s.ldn, c);
        cudaEventRecord(e0);
        const int reps = 5;
        for (int r = 0; r < reps; ++r) dw(h, mode, s.M, s.N, s.H, T, a, (int64_t)s.H * s.M, b, (int64_t)s.H * s.ldn, c);
        cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
        float ms; cudaEventElapsedTime(&ms, e0, e1); ms /= reps;
        const double tflops = 2.0 * T * s.H * s.M * s.N / (ms * 1e-3) / 1e12;
        printf("%-12s T %6lld %-9s %8.3f ms %7.1f TFLOP/s\n", s.what, (long long)T, names[mode], ms, tflops);
      }
      cudaFree(a); cudaFree(b); cudaFree(c);
    }
  // Correctness of the split over a dense sweep (one head, small widths) and production widths.
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  int wrong[3] = {0, 0, 0}, tried = 0;
  auto check = [&](int M, int N, int H, int64_t T) {
    std::vector<int64_t> rows = {0, T / 2, std::max<int64_t>(0, T - 2), T - 1};
    std::sort(rows.begin(), rows.end()); rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    std::vector<__nv_bfloat16> a(T * H * M, __float2bfloat16(0.f)), b(T * H * N, __float2bfloat16(0.f));
    for (auto r : rows) {
      for (int64_t k = 0; k < H * M; ++k) a[r * H * M + k] = __float2bfloat16(nd(rng));
      for (int64_t k = 0; k < H * N; ++k) b[r * H * N + k] = __float2bfloat16(nd(rng));
    }
    std::vector<double> ref((size_t)H * M * N, 0.0);
    for (int hh = 0; hh < H; ++hh) for (auto g : rows) for (int m = 0; m < M; ++m) for (int n = 0; n < N; ++n)
      ref[(hh * M + m) * N + n] += double(__bfloat162float(a[(g * H + hh) * M + m])) * __bfloat162float(b[(g * H + hh) * N + n]);
    __nv_bfloat16 *da, *db; float* dc;
    CK(cudaMalloc(&da, a.size() * 2)); CK(cudaMalloc(&db, b.size() * 2)); CK(cudaMalloc(&dc, ref.size() * 4));
    CK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
    ++tried;
    for (int mode = 0; mode < 3; ++mode) {
      CK(cudaMemset(dc, 0xFF, ref.size() * 4));
      dw(h, mode, M, N, H, T, da, (int64_t)H * M, db, (int64_t)H * N, dc);
      std::vector<float> got(ref.size());
      CK(cudaMemcpy(got.data(), dc, got.size() * 4, cudaMemcpyDeviceToHost));
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(got[i] - ref[i]));
      if (!(worst < 1e-3)) ++wrong[mode];
    }
    cudaFree(da); cudaFree(db); cudaFree(dc);
  };
  for (int64_t T = 1; T <= 12000; ++T) check(16, 8, 1, T);
  for (int H : {1, 2})
    for (int k : {1, 2, 3, 4, 5, 8, 9, 16, 32, 64})
      for (int d : {-2, -1, 0, 1, 2, 3, 5, 64, 127}) check(128, 512, H, int64_t(k) * 1024 + d);
  for (int mode = 0; mode < 3; ++mode) printf("%-9s wrong in %d of %d sums\n", names[mode], wrong[mode], tried);
  return 0;
}
