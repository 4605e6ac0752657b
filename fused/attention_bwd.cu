// Sparse MLA attention backward (SPEC.md §6) on tensor cores, P recomputed from the forward's lse:
// the mma.sync kernel (any shape, sm_80+) and the dispatch between it and the Hopper wgmma kernel
// (attention_bwd_sm90.cu) for production shapes.
//
// Same decomposition as the forward: one CTA = one query row × 64 heads, walking the row's
// selected keys in tiles of 32. Per tile, warp (m, h) recomputes S and dP = dO_lat·Ṽᵀ for heads
// 16m.. and keys 16h.., forms dlogit = P·(dP − Δ) in fp32 and stores P and dlogit as bf16; then
//   dQ~ (registers, fp32, over all tiles): warp (m, h) owns columns 288h..288h+287 of heads 16m..;
//   dK~ partial of the tile (keys × C+R, K-dim = heads): s·dlogitᵀ·Q~ + Pᵀ·dO_lat, 64 columns at a
//   time, added to the global fp32 dK~ with atomics (so dK~ is not bitwise deterministic; the
//   README gives the measured spread). Larger C+R than 576 is covered by grid.z column chunks of dQ~.
// Optionally the indexer loss's target T^ = Σ_h P per slot (AttnBwdArgs::target): the P of the tile
// is in registers already, so the loss (fused/loss_kl.cu) skips its own C+R logits GEMM.
#include <cmath>
#include <stdexcept>
#include <string>

#include "fused/attention.hpp"
#include "fused/attention_bwd_sm90.hpp"
#include "fused/mma.cuh"
#include "fused/attention_tiles.cuh"
#include "fused/cuda_check.hpp"
#include "fused/device.hpp"

namespace dsa::fused {

namespace {

constexpr int HB = 64;
constexpr int BN = 32;
constexpr int QB = 576;            // dQ~ columns per CTA
constexpr int NT_Q = QB / 2 / 8;   // n8 tiles of dQ~ per warp
constexpr int NTHREADS = 256;
constexpr float kLog2e = 1.4426950408889634f;

struct BwdSmem {
  int Dpad, SD, Cpad, SC, SP;
  size_t q, dO, k0, k1, p, ds, stats, target, bytes;
  // single: one key tile buffer (no prefetch) for large C+R that would not fit twice.
  __host__ __device__ BwdSmem(int C, int R, bool single = false) {
    Dpad = (C + R + 15) / 16 * 16;
    SD = Dpad + 8;
    Cpad = (C + 15) / 16 * 16;
    SC = Cpad + 8;
    SP = BN + 8;
    q = 0;
    dO = q + (size_t)HB * SD * 2;
    k0 = dO + (size_t)HB * SC * 2;
    k1 = k0 + (single ? 0 : (size_t)BN * SD * 2);
    p = k1 + (size_t)BN * SD * 2;
    ds = p + (size_t)HB * SP * 2;
    stats = ds + (size_t)HB * SP * 2;
    target = stats + 2 * HB * sizeof(float);
    bytes = target + (HB / 16) * BN * sizeof(float);
  }
};

__device__ __forceinline__ void atomic_add2(float* p, float a, float b, bool pair_ok) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (pair_ok) {
    atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
    return;
  }
#endif
  atomicAdd(p, a);
  if (pair_ok) atomicAdd(p + 1, b);
}

__global__ void __launch_bounds__(NTHREADS, 1) attention_backward_kernel(AttnBwdArgs a, bool single) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int D = a.C + a.R;
  const BwdSmem L(a.C, a.R, single);
  bf16* sQ = reinterpret_cast<bf16*>(smem + L.q);
  bf16* sdO = reinterpret_cast<bf16*>(smem + L.dO);
  bf16* sK[2] = {reinterpret_cast<bf16*>(smem + L.k0), reinterpret_cast<bf16*>(smem + L.k1)};
  bf16* sP = reinterpret_cast<bf16*>(smem + L.p);
  bf16* sdS = reinterpret_cast<bf16*>(smem + L.ds);
  float* sLse = reinterpret_cast<float*>(smem + L.stats);  // log2-domain lse, +inf for absent heads
  float* sDelta = sLse + HB;
  float* sTarget = reinterpret_cast<float*>(smem + L.target);  // [4 head slices][BN]: T^ partials

  const int row = blockIdx.x, h0 = blockIdx.y * HB, q0 = blockIdx.z * QB;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int ms = warp & 3, kh = warp >> 2;
  const int g = lane >> 2, t4 = lane & 3;
  const int SD = L.SD, SC = L.SC, SP = L.SP, Dpad = L.Dpad, Cpad = L.Cpad;
  const int cnt = a.count[row];
  const int32_t* sel = a.sel + (int64_t)row * a.K;
  const bool kvec = (a.C % 8 == 0) && (a.R % 8 == 0);
  const int ntiles = (cnt + BN - 1) / BN;
  const float sl2 = a.scale * kLog2e;
  const int hv = min(HB, a.H - h0);

  tiles::load_rows<NTHREADS>(sQ, SD, HB, hv, a.Qt + ((int64_t)row * a.H + h0) * D, D, D, Dpad, D % 8 == 0);
  tiles::load_rows<NTHREADS>(sdO, SC, HB, hv, a.dO_lat + ((int64_t)row * a.H + h0) * a.C, a.C, a.C, Cpad,
                             a.C % 8 == 0);
  if (ntiles > 0) tiles::load_keys<NTHREADS>(sK[0], SD, BN, sel, 0, cnt, a.c, a.k_pe, a.C, a.R, Dpad, kvec);
  mma::cp_async_commit();
  for (int h = threadIdx.x; h < HB; h += NTHREADS) {
    const bool on = h < hv;
#if DSA_MUTANT_base2_lse_backward
    sLse[h] = on ? a.lse[(int64_t)row * a.H + h0 + h] : INFINITY;  // a natural-log lse used as base 2
#else
    sLse[h] = on ? a.lse[(int64_t)row * a.H + h0 + h] * kLog2e : INFINITY;
#endif
    sDelta[h] = on ? a.delta[(int64_t)row * a.H + h0 + h] : 0.f;
  }

  float dq[NT_Q][4];
#pragma unroll
  for (int i = 0; i < NT_Q; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
  const int r0 = ms * 16 + g;
  const bool key_grads = blockIdx.z == 0;  // dQ~ column chunks > 0 only add to dQ~

  for (int j = 0; j < ntiles; ++j) {
    if (!single) {
      mma::cp_async_wait_all();
      __syncthreads();
      if (j + 1 < ntiles)
        tiles::load_keys<NTHREADS>(sK[(j + 1) & 1], SD, BN, sel, (j + 1) * BN, cnt, a.c, a.k_pe, a.C, a.R, Dpad, kvec);
      mma::cp_async_commit();
    } else {
      if (j > 0) {
        __syncthreads();  // every warp is done with tile j−1
        tiles::load_keys<NTHREADS>(sK[0], SD, BN, sel, j * BN, cnt, a.c, a.k_pe, a.C, a.R, Dpad, kvec);
        mma::cp_async_commit();
      }
      mma::cp_async_wait_all();
      __syncthreads();
    }
    const bf16* K = sK[single ? 0 : j & 1];

    // S = Q~·K~ᵀ (K-dim C+R) and dP = dO_lat·Ṽᵀ (K-dim C) for heads 16ms.., keys 16kh...
    float s[2][4] = {}, dp[2][4] = {};
    {
      const bf16* qa = sQ + (ms * 16 + mma::a_row(lane)) * SD + mma::a_col(lane);
      const bf16* da = sdO + (ms * 16 + mma::a_row(lane)) * SC + mma::a_col(lane);
      const bf16* kb = K + (kh * 16 + mma::bnk_row(lane)) * SD + mma::bnk_col(lane);
      for (int kk = 0; kk < Dpad; kk += 16) {
        uint32_t af[4], bfr[4];
        mma::ldmatrix_x4(af, qa + kk);
        mma::ldmatrix_x4(bfr, kb + kk);
        mma::mma_bf16(s[0], af, bfr[0], bfr[1]);
        mma::mma_bf16(s[1], af, bfr[2], bfr[3]);
        if (kk < Cpad) {
          mma::ldmatrix_x4(af, da + kk);
          mma::mma_bf16(dp[0], af, bfr[0], bfr[1]);
          mma::mma_bf16(dp[1], af, bfr[2], bfr[3]);
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      float p[4], ds[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int slot = j * BN + kh * 16 + nt * 8 + 2 * t4 + (e & 1);
        const int r = r0 + 8 * (e >> 1);
        const bool ok = slot < cnt;
        p[e] = ok ? exp2f(s[nt][e] * sl2 - sLse[r]) : 0.f;
        // A softmax over one key has zero gradient: dP and Δ = dO_lat·O_lat are then the same
        // number summed in two orders (tensor core vs SIMT), so form 0 exactly, never their noise.
#if DSA_MUTANT_dlogit_missing_delta
        ds[e] = ok ? p[e] * dp[nt][e] : 0.f;
#else
        ds[e] = ok && cnt > 1 ? p[e] * (dp[nt][e] - sDelta[r]) : 0.f;
#endif
      }
      const int col = kh * 16 + nt * 8 + 2 * t4;
      if (a.target) {  // T^: this warp's 16 heads of slots col, col+1 (fp32 P, before its bf16 rounding)
        float t0 = p[0] + p[2], t1 = p[1] + p[3];
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {
          t0 += __shfl_xor_sync(0xffffffffu, t0, o);
          t1 += __shfl_xor_sync(0xffffffffu, t1, o);
        }
        if (g == 0) sTarget[ms * BN + col] = t0, sTarget[ms * BN + col + 1] = t1;
      }
      *reinterpret_cast<uint32_t*>(sP + r0 * SP + col) = mma::pack_bf16(p[0], p[1]);
      *reinterpret_cast<uint32_t*>(sP + (r0 + 8) * SP + col) = mma::pack_bf16(p[2], p[3]);
      *reinterpret_cast<uint32_t*>(sdS + r0 * SP + col) = mma::pack_bf16(ds[0], ds[1]);
      *reinterpret_cast<uint32_t*>(sdS + (r0 + 8) * SP + col) = mma::pack_bf16(ds[2], ds[3]);
    }
    __syncthreads();
    if (a.target && key_grads && threadIdx.x < BN) {  // the CTA's 64 heads, in a fixed order
      const int slot = j * BN + threadIdx.x;
      const float t = ((sTarget[threadIdx.x] + sTarget[BN + threadIdx.x]) + sTarget[2 * BN + threadIdx.x]) +
                      sTarget[3 * BN + threadIdx.x];
      if (slot < cnt) atomicAdd(a.target + (int64_t)row * a.K + slot, t);
    }

    // dQ~ += dlogit·K~ over columns q0 + 288kh ...
    {
      const int cw = q0 + kh * (QB / 2);
#pragma unroll
      for (int ks = 0; ks < BN / 16; ++ks) {
        uint32_t af[4];
        mma::ldmatrix_x4(af, sdS + (ms * 16 + mma::a_row(lane)) * SP + ks * 16 + mma::a_col(lane));
        const bf16* kb = K + (ks * 16 + mma::bkn_row(lane)) * SD + mma::bkn_col(lane);
#pragma unroll
        for (int np = 0; np < NT_Q / 2; ++np) {
          const int col0 = cw + np * 16;
          if (col0 < D) {
            uint32_t bfr[4];
            mma::ldmatrix_x4_trans(bfr, kb + col0);
            mma::mma_bf16(dq[2 * np], af, bfr[0], bfr[1]);
            mma::mma_bf16(dq[2 * np + 1], af, bfr[2], bfr[3]);
          }
        }
      }
    }

    // dK~ of this tile's keys: 64 columns at a time; warp w takes keys 16(w&1).. and columns
    // 16(w>>1).. of the chunk; K-dim = the 64 heads.
    if (key_grads) {
      const int mk = warp & 1, nq = warp >> 1;
      const int slot0 = j * BN + mk * 16 + g;
      const int64_t trow0 = slot0 < cnt ? sel[slot0] : -1;
      const int64_t trow1 = slot0 + 8 < cnt ? sel[slot0 + 8] : -1;
      for (int cc = 0; cc < Dpad; cc += 64) {
        const int col0 = cc + nq * 16;
        if (col0 >= Dpad) continue;
        float ak[2][4] = {}, av[2][4] = {};
#pragma unroll
        for (int ks = 0; ks < HB / 16; ++ks) {
          uint32_t af[4], bfr[4];
          const int ar = ks * 16 + mma::akm_row(lane), ac = mk * 16 + mma::akm_col(lane);
          const int br = ks * 16 + mma::bkn_row(lane), bc = col0 + mma::bkn_col(lane);
          mma::ldmatrix_x4_trans(af, sdS + ar * SP + ac);
          mma::ldmatrix_x4_trans(bfr, sQ + br * SD + bc);
          mma::mma_bf16(ak[0], af, bfr[0], bfr[1]);
          mma::mma_bf16(ak[1], af, bfr[2], bfr[3]);
          if (col0 < a.C) {
            mma::ldmatrix_x4_trans(af, sP + ar * SP + ac);
            mma::ldmatrix_x4_trans(bfr, sdO + br * SC + bc);
            mma::mma_bf16(av[0], af, bfr[0], bfr[1]);
            mma::mma_bf16(av[1], af, bfr[2], bfr[3]);
          }
        }
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int col = col0 + nt * 8 + 2 * t4;
          if (col >= D) continue;
          const bool pair = col + 1 < D && (D & 1) == 0;
          if (trow0 >= 0)
            atomic_add2(a.dK + trow0 * D + col, a.scale * ak[nt][0] + av[nt][0], a.scale * ak[nt][1] + av[nt][1],
                        pair);
          if (trow1 >= 0)
            atomic_add2(a.dK + trow1 * D + col, a.scale * ak[nt][2] + av[nt][2], a.scale * ak[nt][3] + av[nt][3],
                        pair);
          if (!pair && col + 1 < D) {  // odd D: the second column separately
            if (trow0 >= 0) atomicAdd(a.dK + trow0 * D + col + 1, a.scale * ak[nt][1] + av[nt][1]);
            if (trow1 >= 0) atomicAdd(a.dK + trow1 * D + col + 1, a.scale * ak[nt][3] + av[nt][3]);
          }
        }
      }
    }
  }

#if DSA_MUTANT_dq_missing_scale
  const float qscale = 1.f;  // dQ~ without the softmax scale
#else
  const float qscale = a.scale;
#endif
  const int cw = q0 + kh * (QB / 2);
#pragma unroll
  for (int i = 0; i < NT_Q; ++i) {
    const int col = cw + i * 8 + 2 * t4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = h0 + r0 + 8 * r;
      if (h >= a.H) continue;
      bf16* dst = a.dQt + ((int64_t)row * a.H + h) * D;
      const float v0 = qscale * dq[i][2 * r], v1 = qscale * dq[i][2 * r + 1];
      if (col + 1 < D && (D & 1) == 0) {
        *reinterpret_cast<__nv_bfloat162*>(dst + col) = __floats2bfloat162_rn(v0, v1);
      } else {
        if (col < D) dst[col] = __float2bfloat16(v0);
        if (col + 1 < D) dst[col + 1] = __float2bfloat16(v1);
      }
    }
  }
}

__global__ void delta_kernel(const bf16* __restrict__ dO, const bf16* __restrict__ O, float* delta, int64_t rows,
                             int C) {
  const int64_t r = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += __bfloat162float(dO[r * C + c]) * __bfloat162float(O[r * C + c]);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) delta[r] = s;
}

}  // namespace

void attention_delta(const bf16* dO_lat, const bf16* O_lat, float* delta, int64_t rows, int C, cudaStream_t s) {
  if (rows <= 0) return;
  delta_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, s>>>(dO_lat, O_lat, delta, rows, C);
  DSA_CUDA_CHECK(cudaGetLastError());
}

namespace {

void attention_backward_mma(const AttnBwdArgs& a, cudaStream_t s) {
  int dev = 0, max_smem = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&dev));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const bool single = BwdSmem(a.C, a.R).bytes > (size_t)max_smem;
  const BwdSmem L(a.C, a.R, single);
  if (L.bytes > (size_t)max_smem)
    throw std::runtime_error("attention_backward: C+R = " + std::to_string(a.C + a.R) + " (C = " +
                             std::to_string(a.C) + ") needs " + std::to_string(L.bytes) +
                             " bytes of shared memory, more than the device's " + std::to_string(max_smem));
  DSA_CUDA_CHECK(cudaFuncSetAttribute(attention_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)L.bytes));
  dim3 grid(a.Tq, (a.H + HB - 1) / HB, (a.C + a.R + QB - 1) / QB);
  attention_backward_kernel<<<grid, NTHREADS, L.bytes, s>>>(a, single);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

BwdKernel attention_backward_kernel_for(const AttnBwdArgs& a) {
  return attention_backward_sm90_fits(a) ? BwdKernel::wgmma : BwdKernel::mma;
}

void attention_backward(const AttnBwdArgs& a, cudaStream_t s, BwdKernel kernel) {
  if (a.Tq <= 0 || a.H <= 0) return;
  if (a.target && a.H > 2 * HB)  // a third head group would make the atomic sum order-dependent
    throw std::invalid_argument("attention_backward: the loss target T^ needs H <= " + std::to_string(2 * HB) +
                                " (H = " + std::to_string(a.H) + ")");
  if (kernel == BwdKernel::mma) return attention_backward_mma(a, s);
  const bool fits = attention_backward_sm90_fits(a);  // asked once: it queries the driver
  if (kernel == BwdKernel::wgmma && !fits)
    throw sm90a_kernel_refused("attention_backward", a.C, a.R);
  if (fits)
    attention_backward_sm90(a, s);
  else
    attention_backward_mma(a, s);
}

}  // namespace dsa::fused
