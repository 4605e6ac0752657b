#include "check/gpu/blas.hpp"

#include <climits>

#include "check/gpu/cuda_util.hpp"

namespace dsa::gpu {
namespace {

int as_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) fail(std::string("GEMM ") + what + " " + std::to_string(v) + " exceeds int", __FILE__, __LINE__);
  return static_cast<int>(v);
}

cublasStatus_t call(cublasHandle_t h, cublasOperation_t a, cublasOperation_t b, int m, int n, int k,
                    const double* alpha, const double* A, int lda, long long sA, const double* B, int ldb,
                    long long sB, const double* beta, double* C, int ldc, long long sC, int batch) {
  return cublasDgemmStridedBatched(h, a, b, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch);
}
cublasStatus_t call(cublasHandle_t h, cublasOperation_t a, cublasOperation_t b, int m, int n, int k,
                    const float* alpha, const float* A, int lda, long long sA, const float* B, int ldb, long long sB,
                    const float* beta, float* C, int ldc, long long sC, int batch) {
  return cublasSgemmStridedBatched(h, a, b, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch);
}

}  // namespace

template <class R>
void gemm(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, R alpha, MatRef A, MatRef B, R beta,
          R* C, int64_t ldc, int64_t strideC, int64_t batch) {
  if (M == 0 || N == 0 || batch == 0) return;
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands, keep the flags.
  const cublasOperation_t opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  // cuBLAS wants ld >= rows of the column-major view even when K = 0.
  const int64_t lda = A.ld > 0 ? A.ld : 1, ldb = B.ld > 0 ? B.ld : 1;
  DSA_GPU_BLAS(call(h, opB, opA, as_int(N, "N"), as_int(M, "M"), as_int(K, "K"), &alpha,
                    static_cast<const R*>(B.p), as_int(ldb, "ldb"), B.stride, static_cast<const R*>(A.p),
                    as_int(lda, "lda"), A.stride, &beta, C, as_int(ldc, "ldc"), strideC, as_int(batch, "batch")));
}

template void gemm<float>(cublasHandle_t, bool, bool, int64_t, int64_t, int64_t, float, MatRef, MatRef, float, float*,
                          int64_t, int64_t, int64_t);
template void gemm<double>(cublasHandle_t, bool, bool, int64_t, int64_t, int64_t, double, MatRef, MatRef, double,
                           double*, int64_t, int64_t, int64_t);

}  // namespace dsa::gpu
