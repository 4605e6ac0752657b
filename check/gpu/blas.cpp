#include "check/gpu/blas.hpp"

#include <climits>
#include <memory>

#include "check/gpu/cuda_util.hpp"
#include "check/gpu/kernels.hpp"

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

void gemm_bf16_values(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, MatRef A,
                      MatRef B, float beta, float* C, int64_t ldc, int64_t strideC, int64_t batch) {
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {  // nothing to multiply: C = beta·C, as gemm<float> does it
    gemm<float>(h, ta, tb, M, N, K, alpha, A, B, beta, C, ldc, strideC, batch);
    return;
  }
  // Each operand packed as it is stored (op(A) is M×K: A is K×M when ta), one block per batch entry
  // or a single one when the entry is shared (stride 0).
  struct Packed {
    std::unique_ptr<void, void (*)(void*)> mem{nullptr, pool_free};
    int64_t ld = 0, stride = 0;
  };
  auto pack = [&](const MatRef& X, int64_t rows, int64_t cols) {
    Packed p;
    const int64_t blocks = X.stride == 0 ? 1 : batch;
    p.mem.reset(pool_alloc(size_t(rows * cols * blocks) * sizeof(uint16_t)));
    pack_bf16(static_cast<const float*>(X.p), X.ld, X.stride, rows, cols, blocks, static_cast<uint16_t*>(p.mem.get()));
    p.ld = cols, p.stride = X.stride == 0 ? 0 : rows * cols;
    return p;
  };
  const Packed a = ta ? pack(A, K, M) : pack(A, M, K), b = tb ? pack(B, N, K) : pack(B, K, N);
  const cublasOperation_t opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  DSA_GPU_BLAS(cublasGemmStridedBatchedEx(h, opB, opA, as_int(N, "N"), as_int(M, "M"), as_int(K, "K"), &alpha,
                                          b.mem.get(), CUDA_R_16BF, as_int(b.ld, "ldb"), b.stride, a.mem.get(),
                                          CUDA_R_16BF, as_int(a.ld, "lda"), a.stride, &beta, C, CUDA_R_32F,
                                          as_int(ldc, "ldc"), strideC, as_int(batch, "batch"), CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
}

template void gemm<float>(cublasHandle_t, bool, bool, int64_t, int64_t, int64_t, float, MatRef, MatRef, float, float*,
                          int64_t, int64_t, int64_t);
template void gemm<double>(cublasHandle_t, bool, bool, int64_t, int64_t, int64_t, double, MatRef, MatRef, double,
                           double*, int64_t, int64_t, int64_t);

}  // namespace dsa::gpu
