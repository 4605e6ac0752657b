// Shared-memory tile loaders of the attention kernels: gathered key rows K~[t] = [c[t]; k_pe[t]]
// and blocks of per-head query-side rows. Rows past the valid count are zero-filled and never read
// from global memory (invisible keys may hold NaN: mask by selection, never by multiplication).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "fused/mma.cuh"

namespace dsa::fused::tiles {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ void zero16(bf16* d) { *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0); }

// dst[r, 0:Dpad) for r < rows: key slot base+r of sel_row (slots ≥ cnt: zeros). Columns [0,C) from
// c, [C, C+R) from k_pe, [C+R, Dpad) zero. vec: C and R are multiples of 8 (16-byte copies).
template <int NTHREADS>
__device__ __forceinline__ void load_keys(bf16* dst, int stride, int rows, const int32_t* sel_row, int base,
                                          int cnt, const bf16* __restrict__ c, const bf16* __restrict__ k_pe,
                                          int C, int R, int Dpad, bool vec) {
  const int chunks = Dpad >> 3;
  for (int i = threadIdx.x; i < rows * chunks; i += NTHREADS) {
    const int r = i / chunks, col = (i - r * chunks) << 3;
    bf16* d = dst + r * stride + col;
    const int slot = base + r;
    if (slot >= cnt) {
      zero16(d);
      continue;
    }
    const int64_t t = sel_row[slot];
    if (vec) {
      if (col < C)
        mma::cp_async16(d, c + t * C + col);
      else if (col < C + R)
        mma::cp_async16(d, k_pe + t * R + (col - C));
      else
        zero16(d);
    } else {
      for (int e = 0; e < 8; ++e) {
        const int cc = col + e;
        d[e] = cc < C ? c[t * C + cc] : cc < C + R ? k_pe[t * R + (cc - C)] : __float2bfloat16(0.f);
      }
    }
  }
}

// dst[r, 0:Wpad) = src[r·row_stride + 0:W) for r < valid, zeros elsewhere (r < rows, cols ≥ W).
// vec: W and row_stride are multiples of 8.
template <int NTHREADS>
__device__ __forceinline__ void load_rows(bf16* dst, int stride, int rows, int valid, const bf16* __restrict__ src,
                                          int64_t row_stride, int W, int Wpad, bool vec) {
  const int chunks = Wpad >> 3;
  for (int i = threadIdx.x; i < rows * chunks; i += NTHREADS) {
    const int r = i / chunks, col = (i - r * chunks) << 3;
    bf16* d = dst + r * stride + col;
    if (r >= valid) {
      zero16(d);
      continue;
    }
    const bf16* s = src + r * row_stride + col;
    if (vec) {
      if (col < W)
        mma::cp_async16(d, s);
      else
        zero16(d);
    } else {
      for (int e = 0; e < 8; ++e) d[e] = col + e < W ? s[e] : __float2bfloat16(0.f);
    }
  }
}

}  // namespace dsa::fused::tiles
