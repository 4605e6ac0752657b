// The absorbed MLA projections and their gradients (SPEC.md §5–§6) as cuBLAS strided-batched GEMMs
// over heads: bf16 operands, fp32 accumulation; outputs bf16 where SPEC.md §8 rounds them, fp32
// for the weight gradients (rounded after the CP all-reduce). Host-callable.
#pragma once

#include <cstdint>

#include <cublas_v2.h>

#include "fused/api.cuh"

namespace dsa::fused {

struct ProjDims {
  int Tq, H, Dn, R, C, Dv;
};

// Q~[g,h] = [q_nope[g,h]·W_UK[h] ; q_pe[g,h]]  → Qt [Tq, H, C+R] bf16.
void absorb_query(cublasHandle_t b, const ProjDims& d, const bf16* q_nope, const bf16* q_pe, const bf16* W_UK,
                  bf16* Qt, cudaStream_t s);
// O[g,h] = W_UV[h]·O_lat[g,h]  → [Tq, H, Dv] bf16.
void output_projection(cublasHandle_t b, const ProjDims& d, const bf16* O_lat, const bf16* W_UV, bf16* O,
                       cudaStream_t s);
// dO_lat[g,h] = W_UV[h]ᵀ·dO[g,h]  → [Tq, H, C] bf16.
void grad_o_lat(cublasHandle_t b, const ProjDims& d, const bf16* dO, const bf16* W_UV, bf16* dO_lat, cudaStream_t s);
// dq_nope[g,h,d] = Σ_c dQ~[g,h,c]·W_UK[h,d,c]  → [Tq, H, Dn] bf16; dq_pe = dQ~[:, :, C:] → [Tq, H, R].
void grad_query(cublasHandle_t b, const ProjDims& d, const bf16* dQt, const bf16* W_UK, bf16* dq_nope, bf16* dq_pe,
                cudaStream_t s);
// This rank's partial dW_UK[h] = Σ_g q_nope[g,h]ᵀ·dQ~_nope[g,h]  → [H, Dn, C] fp32.
void grad_W_UK(cublasHandle_t b, const ProjDims& d, const bf16* q_nope, const bf16* dQt, float* dW_UK, cudaStream_t s);
// This rank's partial dW_UV[h] = Σ_g dO[g,h] ⊗ O_lat[g,h]  → [H, Dv, C] fp32.
void grad_W_UV(cublasHandle_t b, const ProjDims& d, const bf16* dO, const bf16* O_lat, float* dW_UV, cudaStream_t s);

}  // namespace dsa::fused
