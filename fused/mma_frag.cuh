// Warp-level tensor-core helpers of the indexer, top-k and loss kernels: ldmatrix fragment loads,
// bf16 mma.sync m16n8k16 with fp32 accumulation (sm_80+, so the compute_80 PTX target compiles
// too) and the fragment layouts the kernels rely on. Kept in namespace `frag` so it can be
// included beside the attention's own helpers (fused/attention_mma.cuh, owned by k2).
//
// m16n8k16 layouts, g = lane/4, q = lane%4:
//   A (16x16, row): a0 = (g, 2q..2q+1), a1 = (g+8, 2q..), a2 = (g, 2q+8..), a3 = (g+8, 2q+8..)
//   B (16x8, col):  b0 = (k 2q..2q+1, n g), b1 = (k 2q+8.., n g)
//   C (16x8):       c0,c1 = (g, 2q..2q+1), c2,c3 = (g+8, 2q..2q+1)
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

namespace dsa::fused::frag {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 b16 matrices; lane 8i+r gives the address of row r of matrix i.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// d += a·b (bf16 operands, fp32 accumulator). Not volatile: it touches no memory, so the compiler
// may schedule it freely around loads.
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack2(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}

// Elements d, d+1 of a bf16 row of length n as one bf16x2 register, zero outside [0, n).
// `even` says that n is even, so that an in-range pair is one aligned 32-bit load.
__device__ __forceinline__ uint32_t load_pair(const __nv_bfloat16* row, int d, int n, bool even) {
  if (even && d + 1 < n) return __ldg(reinterpret_cast<const unsigned int*>(row + d));
  const __nv_bfloat16 z = __float2bfloat16(0.f);
  return pack2(d < n ? row[d] : z, d + 1 < n ? row[d + 1] : z);
}

// Lane row-address offsets for x4 loads of a 16x16 tile:
//  A from [m][k] storage (non-trans)          : row (lane&7)+8·((lane>>3)&1), col 8·(lane>>4)
//  B pair (two n8 tiles) from [n][k] (non-trans): row (lane&7)+8·(lane>>4),    col 8·((lane>>3)&1)
//  B pair from [k][n] storage (trans)         : row (lane&7)+8·((lane>>3)&1), col 8·(lane>>4)
//  A from [k][m] storage (trans)              : row (lane&7)+8·(lane>>4),    col 8·((lane>>3)&1)
__device__ __forceinline__ int ofs_r0(int lane) { return (lane & 7) + (((lane >> 3) & 1) << 3); }
__device__ __forceinline__ int ofs_c0(int lane) { return (lane >> 4) << 3; }
__device__ __forceinline__ int ofs_r1(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
__device__ __forceinline__ int ofs_c1(int lane) { return ((lane >> 3) & 1) << 3; }

}  // namespace dsa::fused::frag
