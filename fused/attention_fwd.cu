// Sparse MLA attention forward (SPEC.md §5) on tensor cores (mma.sync, any shape, sm_80+), and the
// dispatch between it and the Hopper wgmma kernel (attention_fwd_sm90.cu) for production shapes.
//
// One CTA = one query row × a block of 64 heads (M) × up to 512 latent columns; it walks the row's
// selected keys (select_keys) in tiles of 32 (N). All heads of a row share the same keys, so a key
// tile is gathered once into shared memory and used by every head. 8 warps: warp (m, h) owns heads
// 16m..16m+15; for QKᵀ it takes keys 16h..16h+15 of the tile (K-dim = C+R), for P·V it takes
// latent columns 256h..256h+255 of all 32 keys. The two warps of a head slice share the running
// row max through shared memory; each keeps its own partial row sum. Online softmax in fp32 in the
// log2 domain (exp2 of logit·log2e), lse returned in natural log; P is rounded to bf16 for P·V.
#include <cmath>
#include <stdexcept>
#include <string>

#include "fused/attention.hpp"
#include "fused/attention_fwd_sm90.hpp"
#include "fused/mma.cuh"
#include "fused/softmax_rows.cuh"
#include "fused/attention_tiles.cuh"
#include "fused/cuda_check.hpp"
#include "fused/device.hpp"

namespace dsa::fused {

namespace {

constexpr int HB = 64;          // heads per CTA
constexpr int BN = 32;          // keys per tile
constexpr int CB = 512;         // latent columns per CTA (grid.z covers larger C)
constexpr int NT_O = CB / 2 / 8;  // n8 tiles of O per warp
constexpr int NTHREADS = 256;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct FwdSmem {
  int Dpad, SD, SP;
  size_t q, k0, k1, p, red, bytes;
  __host__ __device__ explicit FwdSmem(int D) {
    Dpad = (D + 15) / 16 * 16;
    SD = Dpad + 8;  // +16 bytes per row: ldmatrix rows fall in distinct bank groups
    SP = BN + 8;
    q = 0;
    k0 = q + (size_t)HB * SD * 2;
    k1 = k0 + (size_t)BN * SD * 2;
    p = k1 + (size_t)BN * SD * 2;
    red = p + (size_t)HB * SP * 2;
    bytes = red + 2 * 2 * HB * sizeof(float);
  }
};

__global__ void __launch_bounds__(NTHREADS, 1) attention_forward_kernel(AttnFwdArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int D = a.C + a.R;
  const FwdSmem L(D);
  bf16* sQ = reinterpret_cast<bf16*>(smem + L.q);
  bf16* sK[2] = {reinterpret_cast<bf16*>(smem + L.k0), reinterpret_cast<bf16*>(smem + L.k1)};
  bf16* sP = reinterpret_cast<bf16*>(smem + L.p);
  float* sMax = reinterpret_cast<float*>(smem + L.red);  // [2][HB]
  float* sSum = sMax + 2 * HB;                           // [2][HB]

  const int row = blockIdx.x, h0 = blockIdx.y * HB, c0 = blockIdx.z * CB;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int ms = warp & 3, kh = warp >> 2;
  const int g = lane >> 2, t4 = lane & 3;
  const int SD = L.SD, SP = L.SP, Dpad = L.Dpad;
  const int cnt = a.count[row];
  const int32_t* sel = a.sel + (int64_t)row * a.K;
  const bool kvec = (a.C % 8 == 0) && (a.R % 8 == 0);
  const bool qvec = (D % 8 == 0);
  const int ntiles = (cnt + BN - 1) / BN;
  const float sl2 = a.scale * kLog2e;

  tiles::load_rows<NTHREADS>(sQ, SD, HB, min(HB, a.H - h0), a.Qt + ((int64_t)row * a.H + h0) * D, D, D, Dpad, qvec);
  if (ntiles > 0) tiles::load_keys<NTHREADS>(sK[0], SD, BN, sel, 0, cnt, a.c, a.k_pe, a.C, a.R, Dpad, kvec);
  mma::cp_async_commit();

  float o[NT_O][4];
#pragma unroll
  for (int i = 0; i < NT_O; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_part[2] = {0.f, 0.f};
  const int r0 = ms * 16 + g;  // this lane's rows r0 and r0 + 8 of the head block

  for (int j = 0; j < ntiles; ++j) {
    mma::cp_async_wait_all();
    __syncthreads();  // tile j visible; every warp is done with tile j−1 (its buffer and sP)
    if (j + 1 < ntiles)
      tiles::load_keys<NTHREADS>(sK[(j + 1) & 1], SD, BN, sel, (j + 1) * BN, cnt, a.c, a.k_pe, a.C, a.R, Dpad, kvec);
    mma::cp_async_commit();
    const bf16* K = sK[j & 1];

    // S = Q·K̃ᵀ for heads 16ms.., keys 16kh.. of the tile.
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    const bf16* qa = sQ + (ms * 16 + mma::a_row(lane)) * SD + mma::a_col(lane);
    const bf16* kb = K + (kh * 16 + mma::bnk_row(lane)) * SD + mma::bnk_col(lane);
    for (int kk = 0; kk < Dpad; kk += 16) {
      uint32_t af[4], bfr[4];
      mma::ldmatrix_x4(af, qa + kk);
      mma::ldmatrix_x4(bfr, kb + kk);
      mma::mma_bf16(s[0], af, bfr[0], bfr[1]);
      mma::mma_bf16(s[1], af, bfr[2], bfr[3]);
    }
    // Scale into the log2 domain; slots past the count are masked by selection (−inf).
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int slot = j * BN + kh * 16 + nt * 8 + 2 * t4 + (e & 1);
        s[nt][e] = slot < cnt ? s[nt][e] * sl2 : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
      }
    softmax::reduce_rows(mx, sMax, kh, r0, t4, softmax::Max{});
    float alpha[2], m_use[2];
    softmax::update_max(mx, m_run, l_part, m_use, alpha);
    float p[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        p[nt][e] = exp2f(s[nt][e] - m_use[e >> 1]);
        l_part[e >> 1] += p[nt][e];
      }
    if (ntiles == 1) {
      // A row whose keys fit one tile: its lse is known now, so P = exp(logit − lse) is rounded
      // to bf16 already normalized, exactly where SPEC.md §8 (and the lowp reference) rounds it.
      float l[2] = {l_part[0], l_part[1]};
      softmax::publish_rows(l, sSum, kh, r0, t4, softmax::Sum{});
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float lt = softmax::combined(sSum, r0, r, softmax::Sum{});
        const float lse2 = lt > 0.f ? m_use[r] + log2f(lt) : INFINITY;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          p[nt][2 * r] = exp2f(s[nt][2 * r] - lse2);
          p[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] - lse2);
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int col = kh * 16 + nt * 8 + 2 * t4;
      *reinterpret_cast<uint32_t*>(sP + r0 * SP + col) = mma::pack_bf16(p[nt][0], p[nt][1]);
      *reinterpret_cast<uint32_t*>(sP + (r0 + 8) * SP + col) = mma::pack_bf16(p[nt][2], p[nt][3]);
    }
#pragma unroll
    for (int i = 0; i < NT_O; ++i) {
      o[i][0] *= alpha[0];
      o[i][1] *= alpha[0];
      o[i][2] *= alpha[1];
      o[i][3] *= alpha[1];
    }
    __syncthreads();  // P of both key halves in sP

    // O += P·V for latent columns c0 + 256kh ...
    const int cw = c0 + kh * (CB / 2);
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks) {
      uint32_t af[4];
      mma::ldmatrix_x4(af, sP + (ms * 16 + mma::a_row(lane)) * SP + ks * 16 + mma::a_col(lane));
      const bf16* vb = K + (ks * 16 + mma::bkn_row(lane)) * SD + mma::bkn_col(lane);
#pragma unroll
      for (int np = 0; np < NT_O / 2; ++np) {
        const int col0 = cw + np * 16;
        if (col0 < a.C) {
          uint32_t bfr[4];
          mma::ldmatrix_x4_trans(bfr, vb + col0);
          mma::mma_bf16(o[2 * np], af, bfr[0], bfr[1]);
          mma::mma_bf16(o[2 * np + 1], af, bfr[2], bfr[3]);
        }
      }
    }
  }

  // Row sums: 4 lanes of a group, then the two key halves.
  softmax::publish_rows(l_part, sSum, kh, r0, t4, softmax::Sum{});
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = softmax::combined(sSum, r0, r, softmax::Sum{});
    inv[r] = ntiles == 1 ? 1.f : l > 0.f ? 1.f / l : 0.f;  // one tile: P was normalized already
    const int h = h0 + r0 + 8 * r;
    if (kh == 0 && t4 == 0 && blockIdx.z == 0 && h < a.H)
      a.lse[(int64_t)row * a.H + h] = cnt == 0 || !(l > 0.f) ? -INFINITY : (m_run[r] + log2f(l)) * kLn2;
  }
  const int cw = c0 + kh * (CB / 2);
#pragma unroll
  for (int i = 0; i < NT_O; ++i) {
    const int col = cw + i * 8 + 2 * t4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = h0 + r0 + 8 * r;
      if (h >= a.H) continue;
      bf16* dst = a.O_lat + ((int64_t)row * a.H + h) * a.C;
      const float v0 = o[i][2 * r] * inv[r], v1 = o[i][2 * r + 1] * inv[r];
      if (col + 1 < a.C && (a.C & 1) == 0) {
        *reinterpret_cast<__nv_bfloat162*>(dst + col) = __floats2bfloat162_rn(v0, v1);
      } else {
        if (col < a.C) dst[col] = __float2bfloat16(v0);
        if (col + 1 < a.C) dst[col + 1] = __float2bfloat16(v1);
      }
    }
  }
}

void attention_forward_mma(const AttnFwdArgs& a, cudaStream_t s) {
  const FwdSmem L(a.C + a.R);
  int dev = 0, max_smem = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&dev));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (L.bytes > (size_t)max_smem)
    throw std::runtime_error("attention_forward: C+R = " + std::to_string(a.C + a.R) + " needs " +
                             std::to_string(L.bytes) + " bytes of shared memory, more than the device's " +
                             std::to_string(max_smem));
  DSA_CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)L.bytes));
  dim3 grid(a.Tq, (a.H + HB - 1) / HB, (a.C + CB - 1) / CB);
  attention_forward_kernel<<<grid, NTHREADS, L.bytes, s>>>(a);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

FwdKernel attention_forward_kernel_for(const AttnFwdArgs& a) {
  return attention_forward_sm90_fits(a) ? FwdKernel::wgmma : FwdKernel::mma;
}

void attention_forward(const AttnFwdArgs& a, cudaStream_t s, FwdKernel kernel) {
  if (a.Tq <= 0 || a.H <= 0) return;
  if (kernel == FwdKernel::mma) return attention_forward_mma(a, s);
  const bool fits = attention_forward_sm90_fits(a);  // asked once: it queries the driver
  if (kernel == FwdKernel::wgmma && !fits)
    throw sm90a_kernel_refused("attention_forward", a.C, a.R);
  if (fits)
    attention_forward_sm90(a, s);
  else
    attention_forward_mma(a, s);
}

}  // namespace dsa::fused
