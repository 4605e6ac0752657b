#include "fused/projections.hpp"

#include <stdexcept>
#include <string>

#include "fused/cuda_check.hpp"

namespace dsa::fused {

namespace {

void blas_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string((int)st));
}

// Row-major C[b] = op(A[b])·op(B[b]) (M×N, K-dim K) for b < batch. cuBLAS is column-major, so it
// computes Cᵀ = op(B)ᵀ·op(A)ᵀ on the same memory. A is stored M×K (K×M when ta), B K×N (N×K when tb).
// beta = 1 adds to C (fp32 C only).
void gemm_rm(cublasHandle_t h, bool ta, bool tb, int M, int N, int K, const bf16* A, int64_t lda, int64_t sA,
             const bf16* B, int64_t ldb, int64_t sB, void* C, cudaDataType_t ct, int64_t ldc, int64_t sC, int batch,
             float beta = 0.f) {
  if (M <= 0 || N <= 0 || batch <= 0) return;
  const float one = 1.f;
  blas_check(cublasGemmStridedBatchedEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                                        &one, B, CUDA_R_16BF, (int)ldb, sB, A, CUDA_R_16BF, (int)lda, sA, &beta, C,
                                        ct, (int)ldc, sC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             "cublasGemmStridedBatchedEx");
}

// C[b] = Σ_{k<K} A[b][k]ᵀ ⊗ B[b][k] in fp32: the weight gradients' reduction over K = Tq query rows
// (A stored K×M, B K×N, row k at k·lda and k·ldb). cuBLAS 13.1 (CUDA 13.0, H100) picks for these
// thin, long shapes a split-K kernel that drops the last rows of K when K mod 128 is small and K
// is past about 2500: 180 of 18130 K tried wrong with one GEMM, among them 4609 and 4610 (nightly
// cases 1741 and 2417), 8194 and 65538 at 128×512 (reports/device/2026-12-06-s15-gemm-probe/).
// So the rows go in two GEMMs: the largest multiple of 128, then the remainder added (β = 1); none
// of 12180 sums went wrong that way, at the single GEMM's speed (the pedantic compute type, also
// right, ran at 35 TFLOP/s against 250–317). fused/projections_test.cpp sweeps K for both.
void row_sum_gemm(cublasHandle_t h, int M, int N, int K, const bf16* A, int64_t lda, int64_t sA, const bf16* B,
                  int64_t ldb, int64_t sB, float* C, int64_t ldc, int64_t sC, int batch) {
  const int K0 = K >= 128 ? K / 128 * 128 : K;  // K < 128 (0 included: C = 0) in one call
  gemm_rm(h, true, false, M, N, K0, A, lda, sA, B, ldb, sB, C, CUDA_R_32F, ldc, sC, batch);
  if (K > K0)
    gemm_rm(h, true, false, M, N, K - K0, A + int64_t(K0) * lda, lda, sA, B + int64_t(K0) * ldb, ldb, sB, C,
            CUDA_R_32F, ldc, sC, batch, 1.f);
}

}  // namespace

void absorb_query(cublasHandle_t b, const ProjDims& d, const bf16* q_nope, const bf16* q_pe, const bf16* W_UK,
                  bf16* Qt, cudaStream_t s) {
  blas_check(cublasSetStream(b, s), "cublasSetStream");
  const int D = d.C + d.R;
  gemm_rm(b, false, false, d.Tq, d.C, d.Dn, q_nope, (int64_t)d.H * d.Dn, d.Dn, W_UK, d.C, (int64_t)d.Dn * d.C, Qt,
          CUDA_R_16BF, (int64_t)d.H * D, D, d.H);
  if (d.R > 0)
    DSA_CUDA_CHECK(cudaMemcpy2DAsync(Qt + d.C, D * sizeof(bf16), q_pe, d.R * sizeof(bf16), d.R * sizeof(bf16),
                                     (size_t)d.Tq * d.H, cudaMemcpyDeviceToDevice, s));
}

void output_projection(cublasHandle_t b, const ProjDims& d, const bf16* O_lat, const bf16* W_UV, bf16* O,
                       cudaStream_t s) {
  blas_check(cublasSetStream(b, s), "cublasSetStream");
  gemm_rm(b, false, true, d.Tq, d.Dv, d.C, O_lat, (int64_t)d.H * d.C, d.C, W_UV, d.C, (int64_t)d.Dv * d.C, O,
          CUDA_R_16BF, (int64_t)d.H * d.Dv, d.Dv, d.H);
}

void grad_o_lat(cublasHandle_t b, const ProjDims& d, const bf16* dO, const bf16* W_UV, bf16* dO_lat, cudaStream_t s) {
  blas_check(cublasSetStream(b, s), "cublasSetStream");
  gemm_rm(b, false, false, d.Tq, d.C, d.Dv, dO, (int64_t)d.H * d.Dv, d.Dv, W_UV, d.C, (int64_t)d.Dv * d.C, dO_lat,
          CUDA_R_16BF, (int64_t)d.H * d.C, d.C, d.H);
}

void grad_query(cublasHandle_t b, const ProjDims& d, const bf16* dQt, const bf16* W_UK, bf16* dq_nope, bf16* dq_pe,
                cudaStream_t s) {
  blas_check(cublasSetStream(b, s), "cublasSetStream");
  const int D = d.C + d.R;
  gemm_rm(b, false, true, d.Tq, d.Dn, d.C, dQt, (int64_t)d.H * D, D, W_UK, d.C, (int64_t)d.Dn * d.C, dq_nope,
          CUDA_R_16BF, (int64_t)d.H * d.Dn, d.Dn, d.H);
  if (d.R > 0)
    DSA_CUDA_CHECK(cudaMemcpy2DAsync(dq_pe, d.R * sizeof(bf16), dQt + d.C, D * sizeof(bf16), d.R * sizeof(bf16),
                                     (size_t)d.Tq * d.H, cudaMemcpyDeviceToDevice, s));
}

void grad_W_UK(cublasHandle_t b, const ProjDims& d, const bf16* q_nope, const bf16* dQt, float* dW_UK, cudaStream_t s) {
  blas_check(cublasSetStream(b, s), "cublasSetStream");
  const int D = d.C + d.R;
  row_sum_gemm(b, d.Dn, d.C, d.Tq, q_nope, (int64_t)d.H * d.Dn, d.Dn, dQt, (int64_t)d.H * D, D, dW_UK, d.C,
               (int64_t)d.Dn * d.C, d.H);
}

void grad_W_UV(cublasHandle_t b, const ProjDims& d, const bf16* dO, const bf16* O_lat, float* dW_UV, cudaStream_t s) {
  blas_check(cublasSetStream(b, s), "cublasSetStream");
  row_sum_gemm(b, d.Dv, d.C, d.Tq, dO, (int64_t)d.H * d.Dv, d.Dv, O_lat, (int64_t)d.H * d.C, d.C, dW_UV, d.C,
               (int64_t)d.Dv * d.C, d.H);
}

}  // namespace dsa::fused
