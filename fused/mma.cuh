// Warp-level tensor-core helpers of every fused kernel: ldmatrix fragment loads, the bf16
// mma.sync m16n8k16 with fp32 accumulation (sm_80+, so the compute_80 PTX target compiles too),
// 16-byte cp.async copies into shared memory and bf16x2 packing.
//
// m16n8k16 layouts, g = lane/4, q = lane%4:
//   A (16x16, row): a0 = (g, 2q..2q+1), a1 = (g+8, 2q..), a2 = (g, 2q+8..), a3 = (g+8, 2q+8..)
//   B (16x8, col):  b0 = (k 2q..2q+1, n g), b1 = (k 2q+8.., n g)
//   C (16x8):       c0,c1 = (g, 2q..2q+1), c2,c3 = (g+8, 2q..2q+1)
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

namespace dsa::fused::mma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// d += a·b, a 16x16 (row), b 16x8 (col), bf16 operands, fp32 accumulator. Not volatile: it
// touches no memory, so the compiler may schedule it freely around the loads.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }
// All but the most recent committed group have landed (a two-buffer pipeline's older tile).
__device__ __forceinline__ void cp_async_wait_prior() { asm volatile("cp.async.wait_group 1;\n" ::); }

// Two fp32 values as one bf16x2 register (lower column in the low half).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack_bf16(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}

// Elements d, d+1 of a bf16 row of length n as one bf16x2 register, zero outside [0, n).
// `even` says that n is even, so that an in-range pair is one aligned 32-bit load.
__device__ __forceinline__ uint32_t load_pair(const __nv_bfloat16* row, int d, int n, bool even) {
  if (even && d + 1 < n) return __ldg(reinterpret_cast<const unsigned int*>(row + d));
  const __nv_bfloat16 z = __float2bfloat16(0.f);
  return pack_bf16(d < n ? row[d] : z, d + 1 < n ? row[d + 1] : z);
}

// Lane address offsets (row, col) inside a 16x16 tile for the three fragment kinds:
// A from [m][k] storage; B (two n8 tiles) from [n][k] storage; B (two n8 tiles) from [k][n]
// storage (transposed load); A from [k][m] storage (transposed load).
__device__ __forceinline__ int a_row(int lane) { return lane & 15; }
__device__ __forceinline__ int a_col(int lane) { return (lane >> 4) << 3; }
__device__ __forceinline__ int bnk_row(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
__device__ __forceinline__ int bnk_col(int lane) { return ((lane >> 3) & 1) << 3; }
__device__ __forceinline__ int bkn_row(int lane) { return (lane & 7) + (((lane >> 3) & 1) << 3); }
__device__ __forceinline__ int bkn_col(int lane) { return (lane >> 4) << 3; }
__device__ __forceinline__ int akm_row(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
__device__ __forceinline__ int akm_col(int lane) { return ((lane >> 3) & 1) << 3; }

}  // namespace dsa::fused::mma
