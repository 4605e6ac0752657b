// Row-major strided-batched GEMM on cuBLAS, fp64 (exact) or fp32 (the bf16 policy: operands hold
// bf16 values, products and sums in fp32; cuBLAS's default math mode uses no TF32).
#pragma once

#include <cstdint>

#include <cublas_v2.h>

namespace dsa::gpu {

struct MatRef {  // a row-major operand: pointer, leading dimension, stride between batch entries
  const void* p;
  int64_t ld;
  int64_t stride = 0;
};

// C[i] = alpha·op(A[i])·op(B[i]) + beta·C[i] for i < batch, all row-major. op(A) is M×K (A is K×M
// when ta), op(B) is K×N (B is N×K when tb). Nothing runs when M, N or batch is 0; K = 0 scales C.
template <class R>
void gemm(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, R alpha, MatRef A, MatRef B, R beta,
          R* C, int64_t ldc, int64_t strideC, int64_t batch);

}  // namespace dsa::gpu
