// Row-major strided-batched GEMM on cuBLAS, fp64 (exact) or fp32 (the bf16 policy: products and sums
// in fp32; cuBLAS's default math mode uses no TF32).
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

// gemm<float> of the bf16 policy where both operands hold bf16 values (inputs, and what the policy
// has rounded: Q~, bf(P), O_lat, dO_lat, dQ~). Their products are exact in fp32, so the operands go
// to the tensor cores as packed bf16 copies, with fp32 sums, instead of through fp32 FMAs: the
// policy's arithmetic (bf16 products, fp32 accumulation), as a fused kernel does it. A GEMM with an
// fp32 operand (dlogit, du) stays on gemm<float>.
void gemm_bf16_values(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, MatRef A,
                      MatRef B, float beta, float* C, int64_t ldc, int64_t strideC, int64_t batch);

}  // namespace dsa::gpu
