// Probe: which cuBLAS call shapes drop the tail of K for dW = Σ_g a[g]ᵀ b[g] (thin M×N, long K).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#define CK(x) do { auto e_ = (x); if (e_ != 0) { printf("error %d at %s:%d\n", (int)e_, __FILE__, __LINE__); exit(1); } } while (0)

static std::vector<__nv_bfloat16> rows_only(int64_t T, int64_t W, const std::vector<int64_t>& rows, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<__nv_bfloat16> x(T * W, __float2bfloat16(0.f));
  for (auto r : rows) for (int64_t k = 0; k < W; ++k) x[r * W + k] = __float2bfloat16(nd(rng));
  return x;
}

int main() {
  cublasHandle_t h; CK(cublasCreate(&h));
  cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
  int ver; cublasGetVersion(h, &ver); printf("cuBLAS version %d\n", ver);
  std::mt19937 rng(7);
  struct Shape { int M, N; };  // M = Dv (a's width), N = C (b's width)
  const int64_t Ts[] = {64, 4096, 4104, 4607, 4608, 4609, 4610, 4611, 4616, 5000, 8194, 20002, 65538};
  void* ws; size_t wsz = 32 << 20; CK(cudaMalloc(&ws, wsz));
  for (Shape s : {Shape{16, 8}, Shape{8, 8}, Shape{16, 16}, Shape{128, 512}, Shape{32, 32}})
    for (int64_t T : Ts) {
      std::vector<int64_t> rows = {0, T / 2, T - 2, T - 1};
      auto a = rows_only(T, s.M, rows, rng), b = rows_only(T, s.N, rows, rng);
      std::vector<double> ref(s.M * s.N, 0.0);
      for (auto g : rows) for (int m = 0; m < s.M; ++m) for (int n = 0; n < s.N; ++n)
        ref[m * s.N + n] += double(__bfloat162float(a[g * s.M + m])) * __bfloat162float(b[g * s.N + n]);
      __nv_bfloat16 *da, *db; float* dc;
      CK(cudaMalloc(&da, a.size() * 2)); CK(cudaMalloc(&db, b.size() * 2)); CK(cudaMalloc(&dc, ref.size() * 4));
      CK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
      const float one = 1, zero = 0;
      auto check = [&](const char* name, bool transposed_out) {
        std::vector<float> got(ref.size());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got.data(), dc, got.size() * 4, cudaMemcpyDeviceToHost));
        double worst = 0;
        for (int m = 0; m < s.M; ++m) for (int n = 0; n < s.N; ++n) {
          double v = transposed_out ? got[n * s.M + m] : got[m * s.N + n];
          worst = std::max(worst, std::fabs(v - ref[m * s.N + n]));
        }
        printf("M %3d N %3d T %6lld %-28s %s (max err %.3g)\n", s.M, s.N, (long long)T, name, worst < 1e-3 ? "ok" : "WRONG", worst);
      };
      // 1. what projections.cpp does: col-major C' (N×M) = B(N×K, ld N) · A(M×K ld M)ᵀ, strided batched, batch 1
      CK(cudaMemset(dc, 0xFF, ref.size() * 4));
      CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, s.N, s.M, T, &one, db, CUDA_R_16BF, s.N, 0, da,
                                    CUDA_R_16BF, s.M, 0, &zero, dc, CUDA_R_32F, s.N, 0, 1, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
      check("strided-batched (ours)", false);
      // 2. plain GemmEx
      CK(cudaMemset(dc, 0xFF, ref.size() * 4));
      CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, s.N, s.M, T, &one, db, CUDA_R_16BF, s.N, da, CUDA_R_16BF, s.M,
                      &zero, dc, CUDA_R_32F, s.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      check("gemmex", false);
      // 3. operands swapped: col-major (M×N) = A · Bᵀ
      CK(cudaMemset(dc, 0xFF, ref.size() * 4));
      CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, s.M, s.N, T, &one, da, CUDA_R_16BF, s.M, db, CUDA_R_16BF, s.N,
                      &zero, dc, CUDA_R_32F, s.M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      check("gemmex swapped", true);
      // 4. pedantic compute
      CK(cudaMemset(dc, 0xFF, ref.size() * 4));
      CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, s.N, s.M, T, &one, db, CUDA_R_16BF, s.N, da, CUDA_R_16BF, s.M,
                      &zero, dc, CUDA_R_32F, s.N, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
      check("gemmex pedantic", false);
      // 5. K in chunks of 4096, beta 1 after the first
      CK(cudaMemset(dc, 0xFF, ref.size() * 4));
      for (int64_t k0 = 0; k0 < T; k0 += 4096) {
        const int64_t kk = std::min<int64_t>(4096, T - k0);
        CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, s.N, s.M, kk, &one, db + k0 * s.N, CUDA_R_16BF, s.N,
                        da + k0 * s.M, CUDA_R_16BF, s.M, k0 ? &one : &zero, dc, CUDA_R_32F, s.N, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT));
      }
      check("gemmex K chunks 4096", false);
      // 6. cublasLt: every heuristic algorithm, report each
      {
        cublasLtMatmulDesc_t op; CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t tN = CUBLAS_OP_N, tT = CUBLAS_OP_T;
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tN, sizeof tN));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tT, sizeof tT));
        cublasLtMatrixLayout_t la, lb, lc;
        CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.N, T, s.N));
        CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.M, T, s.M));
        CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, s.N, s.M, s.N));
        cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz));
        cublasLtMatmulHeuristicResult_t res[16]; int n = 0;
        CK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 16, res, &n));
        for (int i = 0; i < n && i < 6; ++i) {
          CK(cudaMemset(dc, 0xFF, ref.size() * 4));
          int algo_id = 0, splitk = 0; size_t w;
          cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof algo_id, &w);
          cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
          char name[64]; snprintf(name, sizeof name, "lt algo %d id %d splitk %d", i, algo_id, splitk);
          auto st = cublasLtMatmul(lt, op, &one, db, la, da, lb, &zero, dc, lc, dc, lc, &res[i].algo, ws, wsz, 0);
          if (st) { printf("%s status %d\n", name, (int)st); continue; }
          check(name, false);
        }
        cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc); cublasLtMatmulDescDestroy(op);
      }
      cudaFree(da); cudaFree(db); cudaFree(dc);
    }
  return 0;
}
