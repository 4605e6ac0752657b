// The indexer KL loss (SPEC.md §7), forward and backward, one CTA (8 warps) per local query row.
//
// A row's support (sparse: the valid, visible slots of its attention index row; dense: its visible
// keys) is walked in tiles of 128 keys, 16 per warp, in up to three passes:
//   A (dense only) per-head softmax normalizer over the support: online max/sum, lse_h;
//      sparse mode reuses the attention's lse instead, A_h = exp(s·Q~·K~ − lse_h);
//   B Σ_t T^[t] (T^ = Σ_h A_h) and the log-sum-exp of the indexer scores I over the support
//      (with T^ and I handed in, LossArgs::target and ::scores, a sum over the row's slots);
//   C T = T^/max(ΣT^, 1e-10), logQ, KL, dI = coeff/N·(softmax(I) − T), du = bf16(dI·w·φ'(u)),
//      dw = Σ_t dI·φ(u), dk_I[t] += du·q_I (fp32 atomics), dq_I += duᵀ·k_I.
// Sparse mode keeps T^ per index slot from pass B for pass C (a [Tq, K'] fp32 scratch, the size of
// the index array); dense mode recomputes the logits in pass C instead, so its memory stays O(1)
// per row beyond shared memory. Nothing of size [H, Tq, Tp] (or [Tq, Tp]) is ever materialized. All products run on tensor cores
// (mma.sync m16n8k16 bf16, fp32 accumulate): logits with the 16 keys of a warp as M and the heads
// as N (K~ gathered from global straight into A fragments, Q~[g] from shared memory), so the
// head sum of T^ stays in-thread plus a quad shuffle; u = k_I·q_Iᵀ the same way; dk_I = du·q_I
// with du from shared memory; dq_I = duᵀ·k_I over the CTA's 128 keys, each (16 heads × 64 dims;
// 32 at HI ≤ 32) block owned by one warp for the whole row, so dq_I, dw and kl are deterministic. dk_I sums
// rows through fp32 atomics: not bitwise deterministic run to run.
// Shared memory: Q~ H16·(CR16+8)·2 + q_I HI16·(DI16+8)·2 + k_I tile 128·(DI16+8)·2 + du tile
// 128·(HI16+8)·2 + small: 216 KB at H = 128, C+R = 576, HI = 64, DI = 128. With T^ handed in by the
// attention backward (LossArgs::target, sparse mode) there are no logits and no Q~: 72 KB there,
// plus 34 KB that hold the row's running dq_I (and, before pass C, pass B's second k_I tile), two
// CTAs per SM; at HI ≤ 32 (DI 128) a second k_I tile of its own fits beside them too (105 KB), and
// pass C then stages the next tile's keys while it computes this one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "fused/api.cuh"
#include "fused/cuda_check.hpp"
#include "fused/indexer_rows.cuh"
#include "fused/mma.cuh"
#include "core/errors.hpp"

namespace dsa::fused {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = kWarps * 16;  // keys per CTA tile
constexpr int kMaxHP = 8;           // head pairs (16 heads) of the attention: H ≤ 128
constexpr int kMaxIP = 8;           // head pairs of the indexer: HI ≤ 128
constexpr float kNegInf = -__builtin_huge_valf();

__host__ __device__ inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

struct LossLayout {
  int Hp, CRp, LDQ, HIp, DIp, LDI, LDU;
  int LDA;  // row stride of the running dq_I in shared memory (DIp + 8: float2 adds hit 32 banks), 0: global
  // 1: a second k_I tile of its own after dq_I, so that passes B and C both stage the next tile
  // while they compute this one; 0: pass B borrows the dq_I region (LDA ≠ 0) and pass C waits.
  int kI2;
  __host__ __device__ size_t off_q() const { return size_t(Hp) * LDQ * 2; }
  __host__ __device__ size_t off_kI() const { return off_q() + size_t(HIp) * LDI * 2; }
  __host__ __device__ size_t off_du() const { return off_kI() + kI_bytes(); }
  __host__ __device__ size_t off_w() const { return off_du() + size_t(kTile) * LDU * 2; }
  __host__ __device__ size_t off_lse() const { return off_w() + size_t(HIp) * 4; }
  __host__ __device__ size_t off_red() const { return off_lse() + size_t(Hp) * 4; }
  // Pass A's per-warp (max, sum) per head needs 2·Hp floats a warp; with T^ given (LDQ = 0) only
  // dw's HIp and pass B's pair remain.
  __host__ __device__ size_t off_dq() const {
    const int per_warp = LDQ == 0 ? (HIp > 2 ? HIp : 2) : (2 * Hp > HIp ? 2 * Hp : HIp);
    return off_red() + size_t(kWarps) * per_warp * 4;
  }
  // The running dq_I, which pass B (before it is zeroed) uses as its second k_I tile unless kI2.
  __host__ __device__ size_t dq_bytes() const {
    if (LDA == 0) return 0;
    const size_t dq = size_t(HIp) * LDA * 4;
    return kI2 || dq > kI_bytes() ? dq : kI_bytes();
  }
  __host__ __device__ size_t kI_bytes() const { return size_t(kTile) * LDI * 2; }
  __host__ __device__ size_t off_kI2() const { return off_dq() + dq_bytes(); }
  __host__ __device__ size_t bytes() const { return off_kI2() + (kI2 ? kI_bytes() : 0); }
};

__device__ __forceinline__ float dphi(float u, bool relu) {
  if (!relu) return 1.f;
#if DSA_MUTANT_relu_grad_one_at_zero
  return u >= 0.f ? 1.f : 0.f;
#else
  return u > 0.f ? 1.f : 0.f;
#endif
}

// (m, s) of an online log-sum-exp absorbs (m2, s2).
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == kNegInf) return;
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Sum over the CTA; every thread gets the result.
__device__ float cta_sum(float v, float* red) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < kWarps; ++w) t += red[w];
  __syncthreads();
  return t;
}

// K~[t] = [c[t]; k_pe[t]] elements d, d+1 as bf16x2 (zero past C+R).
__device__ __forceinline__ uint32_t ktilde_pair(const bf16* crow, const bf16* prow, int d, int C, int R, bool even) {
  if (even) {  // C and R even: a pair never straddles c and k_pe
    if (d < C) return __ldg(reinterpret_cast<const unsigned int*>(crow + d));
    if (d < C + R) return __ldg(reinterpret_cast<const unsigned int*>(prow + d - C));
    return 0u;
  }
  const bf16 z = __float2bfloat16(0.f);
  auto at = [&](int x) { return x < C ? crow[x] : (x < C + R ? prow[x - C] : z); };
  return mma::pack_bf16(at(d), at(d + 1));
}

struct RowCtx {
  const LossArgs& a;
  const LossLayout& L;
  const bf16* sQ;
  const bf16* sq;
  const bf16* skI;
  const int* skeys;
  int lane, warp, gq, qq;
};

// logits/s for this warp's 16 keys × all heads: acc[hp][n] is the m16n8 tile of heads hp·16+8n.
__device__ __forceinline__ void logits_tile(const RowCtx& x, float (&acc)[kMaxHP][2][4]) {
  const LossArgs& a = x.a;
#pragma unroll
  for (int hp = 0; hp < kMaxHP; ++hp)
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[hp][n][c] = 0.f;
  const int t0 = x.skeys[x.warp * 16 + x.gq], t1 = x.skeys[x.warp * 16 + x.gq + 8];
  const bf16* c0 = a.c + size_t(t0 < 0 ? 0 : t0) * a.C;
  const bf16* p0 = a.k_pe + size_t(t0 < 0 ? 0 : t0) * a.R;
  const bf16* c1 = a.c + size_t(t1 < 0 ? 0 : t1) * a.C;
  const bf16* p1 = a.k_pe + size_t(t1 < 0 ? 0 : t1) * a.R;
  const bool even = (a.C % 2 == 0) && (a.R % 2 == 0);
  const int nhp = x.L.Hp / 16, nks = x.L.CRp / 16;
  const bf16* bp = x.sQ + size_t(mma::bnk_row(x.lane)) * x.L.LDQ + mma::bnk_col(x.lane);
  auto load_a = [&](int ks, uint32_t (&af)[4]) {
    const int d = ks * 16 + 2 * x.qq;
    af[0] = t0 >= 0 ? ktilde_pair(c0, p0, d, a.C, a.R, even) : 0u;
    af[1] = t1 >= 0 ? ktilde_pair(c1, p1, d, a.C, a.R, even) : 0u;
    af[2] = t0 >= 0 ? ktilde_pair(c0, p0, d + 8, a.C, a.R, even) : 0u;
    af[3] = t1 >= 0 ? ktilde_pair(c1, p1, d + 8, a.C, a.R, even) : 0u;
  };
  // A four-deep ring of A fragments: step ks+3 is in flight while step ks runs (gathered K~ rows
  // come from L2; one step of 2·H/8 mma.sync is shorter than that latency).
  auto mma_step = [&](int ks, const uint32_t (&af)[4]) {
#pragma unroll
    for (int hp = 0; hp < kMaxHP; ++hp) {
      if (hp < nhp) {
        uint32_t b[4];
        mma::ldmatrix_x4(b, bp + size_t(hp * 16) * x.L.LDQ + ks * 16);
        mma::mma_bf16(acc[hp][0], af, b[0], b[1]);
        mma::mma_bf16(acc[hp][1], af, b[2], b[3]);
      }
    }
  };
  uint32_t r0[4] = {}, r1[4] = {}, r2[4] = {}, r3[4] = {};
  load_a(0, r0);
  if (1 < nks) load_a(1, r1);
  if (2 < nks) load_a(2, r2);
  for (int ks = 0; ks < nks; ks += 4) {
    if (ks + 3 < nks) load_a(ks + 3, r3);
    mma_step(ks, r0);
    if (ks + 1 >= nks) break;
    if (ks + 4 < nks) load_a(ks + 4, r0);
    mma_step(ks + 1, r1);
    if (ks + 2 >= nks) break;
    if (ks + 5 < nks) load_a(ks + 5, r1);
    mma_step(ks + 2, r2);
    if (ks + 3 >= nks) break;
    if (ks + 6 < nks) load_a(ks + 6, r2);
    mma_step(ks + 3, r3);
  }
}

// T^ of the warp's rows g (r = 0) and g+8 (r = 1): Σ_h exp(s·logit − lse_h), all quad lanes.
__device__ __forceinline__ void target_tile(const RowCtx& x, const float* slse, float (&That)[2]) {
  float acc[kMaxHP][2][4];
  logits_tile(x, acc);
  const float s = x.a.softmax_scale;
  float v0 = 0.f, v1 = 0.f;
#pragma unroll
  for (int hp = 0; hp < kMaxHP; ++hp)
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int h = hp * 16 + n * 8 + 2 * x.qq + c;
        if (h < x.a.H) {
          const float l = slse[h];
          if (l != kNegInf) {  // a head with an empty support contributes nothing (never exp(+inf))
            v0 += expf(s * acc[hp][n][c] - l);
            v1 += expf(s * acc[hp][n][2 + c] - l);
          }
        }
      }
  That[0] = quad_sum(v0);
  That[1] = quad_sum(v1);
}

// u = k_I[t]·q_I[g,h] for the warp's 16 keys × all indexer heads (k_I rows staged in skI).
template <int kIP>
__device__ __forceinline__ void u_tile(const RowCtx& x, float (&ua)[kIP][2][4]) {
#pragma unroll
  for (int ip = 0; ip < kIP; ++ip)
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) ua[ip][n][c] = 0.f;
  const int nip = x.L.HIp / 16, nks = x.L.DIp / 16;
  const bf16* ap = x.skI + size_t(x.warp * 16 + mma::a_row(x.lane)) * x.L.LDI + mma::a_col(x.lane);
  const bf16* bp = x.sq + size_t(mma::bnk_row(x.lane)) * x.L.LDI + mma::bnk_col(x.lane);
  for (int ks = 0; ks < nks; ++ks) {
    uint32_t af[4];
    mma::ldmatrix_x4(af, ap + ks * 16);
#pragma unroll
    for (int ip = 0; ip < kIP; ++ip) {
      if (ip < nip) {
        uint32_t b[4];
        mma::ldmatrix_x4(b, bp + size_t(ip * 16) * x.L.LDI + ks * 16);
        mma::mma_bf16(ua[ip][0], af, b[0], b[1]);
        mma::mma_bf16(ua[ip][1], af, b[2], b[3]);
      }
    }
  }
}

// Indexer scores I of rows g, g+8 from u (all quad lanes).
template <int kIP>
__device__ __forceinline__ void scores_tile(const RowCtx& x, const float* sw, const float (&ua)[kIP][2][4],
                                            float (&I)[2]) {
  float v0 = 0.f, v1 = 0.f;
#pragma unroll
  for (int ip = 0; ip < kIP; ++ip)
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int h = ip * 16 + n * 8 + 2 * x.qq + c;
        if (h < x.a.HI) {
          v0 += sw[h] * phi(ua[ip][n][c], x.a.relu);
          v1 += sw[h] * phi(ua[ip][n][2 + c], x.a.relu);
        }
      }
  I[0] = quad_sum(v0);
  I[1] = quad_sum(v1);
}

// kGivenT: sparse mode with T^ handed in (LossArgs::target, read through tscratch): no logits and
// no Q~ in shared memory, so two CTAs share an SM. Capped at 128 registers a thread it spilled
// ~0.7–1 KB (ptxas, sm_90a) and was still faster: on an H100 at DeepSeek-V3.2, S = 4096, 7.1 ms
// against 9.4 with one CTA of 245 registers (reports/device/2026-12-06-s17-tgt1-bench-loss-*.json).
// The dq_I accumulator and pass B's double buffer in shared memory (LossLayout::LDA) took it to
// 4.6 ms (reports/device/2026-12-06-s18-s18a-bench-loss-*.json, against c3b6ba4 in the same run).
// Most of the spill was the dense pass A, which it never runs: without it compiled in, kIP ≤ 4
// fits 128 registers with no spill (kIP 8: ~330 bytes).
// kIP: indexer head pairs the registers are sized for (2: HI ≤ 32, 4: HI ≤ 64, 8: HI ≤ 128); u
// and the dw partials are 3·kIP·8 floats a thread, which is what the two-CTA build can least afford.
template <bool kGivenT, int kIP>
__global__ void __launch_bounds__(kThreads, kGivenT ? 2 : 1)
    indexer_loss_kernel(const LossArgs a, const LossLayout L, const float* tscratch_in) {
  float* tscratch = const_cast<float*>(tscratch_in);  // written by pass B only when !kGivenT
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sq = reinterpret_cast<bf16*>(smem + L.off_q());
  bf16* skI = reinterpret_cast<bf16*>(smem + L.off_kI());
  bf16* sdu = reinterpret_cast<bf16*>(smem + L.off_du());
  float* sw = reinterpret_cast<float*>(smem + L.off_w());
  float* slse = reinterpret_cast<float*>(smem + L.off_lse());
  float* red = reinterpret_cast<float*>(smem + L.off_red());
  __shared__ int skeys[2 * kTile];  // a tile's keys; pass B's pipeline keeps two tiles
  __shared__ float sred[kWarps];

  const int i = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, qq = lane & 3;
  const int H = a.H, HI = a.HI, DI = a.DI;
  float* dq_row = a.dq_I + size_t(i) * HI * DI;
  // The running dq_I[g], added to once per tile by its owner threads: in shared memory where it
  // fits (no global read-modify-write per tile) and then written out once at the end.
  float* dq_acc = L.LDA ? reinterpret_cast<float*>(smem + L.off_dq()) : dq_row;
  const int lda = L.LDA ? L.LDA : DI;
  if (!L.LDA)  // (the shared-memory accumulator is zeroed after pass B, which borrows it)
    for (int e = tid; e < HI * DI; e += kThreads) dq_row[e] = 0.f;
  auto no_gradient = [&] {  // zero KL and gradients for this row
    if (tid == 0) a.kl[i] = 0.f;
    for (int h = tid; h < HI; h += kThreads) a.dw[size_t(i) * HI + h] = 0.f;
    if (L.LDA)
      for (int e = tid; e < HI * DI; e += kThreads) dq_row[e] = 0.f;
  };
  const KeyRange vr = visible_range(a.rows, i, a.Tp);
  const int nkeys = a.dense ? max(0, vr.end - vr.begin) : a.K;
  if (!a.counted[i] || nkeys == 0) {  // not in the loss
    no_gradient();
    return;
  }
  const int ntiles = (nkeys + kTile - 1) / kTile;

  // Q~[g] (H16 × CR16), q_I[g] (HI16 × DI16), w, zero-padded, into shared memory.
  const int CR = a.C + a.R;
  const bool cr_even = (CR % 2) == 0, di_even = (DI % 2) == 0;
  const bool dk_vec = DI % 4 == 0 && (reinterpret_cast<uintptr_t>(a.dk_I) & 15) == 0;  // sm_90 float4 atomics
  (void)dk_vec;
  const bool kI_vec = DI % 8 == 0 && (reinterpret_cast<uintptr_t>(a.k_I) & 15) == 0;
  const bool dq_vec = di_even && (reinterpret_cast<uintptr_t>(dq_acc) & 7) == 0;  // float2 adds
  if (kGivenT) {
    // no Q~: T^ comes from the attention backward
  } else if (CR % 8 == 0 && (reinterpret_cast<uintptr_t>(a.Qt) & 15) == 0) {
    for (int e = tid; e < L.Hp * (L.CRp / 8); e += kThreads) {
      const int h = e / (L.CRp / 8), d = 8 * (e % (L.CRp / 8));
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (h < H && d < CR) v = __ldg(reinterpret_cast<const uint4*>(a.Qt + (size_t(i) * H + h) * CR + d));
      *reinterpret_cast<uint4*>(sQ + size_t(h) * L.LDQ + d) = v;
    }
  } else {
    for (int e = tid; e < L.Hp * (L.CRp / 2); e += kThreads) {
      const int h = e / (L.CRp / 2), d = 2 * (e % (L.CRp / 2));
      const uint32_t v = h < H ? mma::load_pair(a.Qt + (size_t(i) * H + h) * CR, d, CR, cr_even) : 0u;
      *reinterpret_cast<uint32_t*>(sQ + size_t(h) * L.LDQ + d) = v;
    }
  }
  for (int e = tid; e < L.HIp * (L.DIp / 2); e += kThreads) {
    const int h = e / (L.DIp / 2), d = 2 * (e % (L.DIp / 2));
    const uint32_t v = h < HI ? mma::load_pair(a.q_I + (size_t(i) * HI + h) * DI, d, DI, di_even) : 0u;
    *reinterpret_cast<uint32_t*>(sq + size_t(h) * L.LDI + d) = v;
  }
  for (int h = tid; h < L.HIp; h += kThreads) sw[h] = h < HI ? __bfloat162float(a.w[size_t(i) * HI + h]) : 0.f;
  for (int h = tid; h < L.Hp; h += kThreads) slse[h] = (!kGivenT && !a.dense && h < H) ? a.lse[size_t(i) * H + h] : kNegInf;

  const RowCtx x{a, L, sQ, sq, skI, skeys, lane, warp, gq, qq};
  // Stage tile `tile`: the warp's 16 keys (−1: not in the support) and their k_I rows.
  // Rows walk their tiles from a row-dependent start, so that concurrent CTAs (whose sparse
  // index rows list keys in similar order) do not all add into the same dk_I rows at once. The
  // order is fixed per row, so everything but dk_I stays bitwise deterministic.
  const int rot = i % ntiles;
  // The key of slot `tile`·128 + warp·16 + lane (lanes < 16; −1: not in the support). A lane loads
  // the next tile's key while this tile computes, so the gather waits on one load, not two.
  auto key_at = [&](int tile) {
    const int j = tile * kTile + warp * 16 + lane;
    int t = -1;
    if (lane >= 16) return t;
    if (a.dense) {
      if (vr.begin + j < vr.end) t = vr.begin + j;
    } else if (j < a.K) {
      t = a.indices[size_t(i) * a.K + j];
      if (t < vr.begin || t >= vr.end) t = -1;  // −1, INT_MIN, ≥ Tp and non-causal slots
    }
    return t;
  };
  // The warp's 16 keys into keys[] and their k_I rows into kI (async: cp.async, then the caller
  // commits and waits; else plain loads and stores, done when this returns).
  auto stage_rows = [&](int t, int* keys, bf16* kI, bool async) {
    if (lane < 16) keys[warp * 16 + lane] = t;
    __syncwarp();
    if (kI_vec) {  // 16-byte rows pieces
      for (int e = lane; e < 16 * (L.DIp / 8); e += 32) {
        const int r = e / (L.DIp / 8), d = 8 * (e % (L.DIp / 8));
        const int tr = keys[warp * 16 + r];
        bf16* dst = kI + size_t(warp * 16 + r) * L.LDI + d;
        const bool in = tr >= 0 && d < DI;
        if (async && in) {
          mma::cp_async16(dst, a.k_I + size_t(tr) * DI + d);
        } else {
          uint4 v = make_uint4(0u, 0u, 0u, 0u);
          if (in) v = __ldg(reinterpret_cast<const uint4*>(a.k_I + size_t(tr) * DI + d));
          *reinterpret_cast<uint4*>(dst) = v;
        }
      }
    } else {
      for (int e = lane; e < 16 * (L.DIp / 2); e += 32) {
        const int r = e / (L.DIp / 2), d = 2 * (e % (L.DIp / 2));
        const int tr = keys[warp * 16 + r];
        const uint32_t v = tr >= 0 ? mma::load_pair(a.k_I + size_t(tr) * DI, d, DI, di_even) : 0u;
        *reinterpret_cast<uint32_t*>(kI + size_t(warp * 16 + r) * L.LDI + d) = v;
      }
    }
    if (!async) __syncwarp();
  };
  auto stage = [&](int t) { stage_rows(t, skeys, skI, false); };
  __syncthreads();

  // ---- pass A (dense): per-head lse over the visible keys ------------------------------------
  if (!kGivenT && a.dense) {  // (kGivenT is sparse only: no pass A compiled there)
    float m[kMaxHP][2][2], s[kMaxHP][2][2];
#pragma unroll
    for (int hp = 0; hp < kMaxHP; ++hp)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int c = 0; c < 2; ++c) m[hp][n][c] = kNegInf, s[hp][n][c] = 0.f;
    for (int tile = 0; tile < ntiles; ++tile) {
      stage(key_at((tile + rot) % ntiles));
      float acc[kMaxHP][2][4];
      logits_tile(x, acc);
      const bool v0 = skeys[warp * 16 + gq] >= 0, v1 = skeys[warp * 16 + gq + 8] >= 0;
#pragma unroll
      for (int hp = 0; hp < kMaxHP; ++hp)
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float l0 = v0 ? a.softmax_scale * acc[hp][n][c] : kNegInf;
            const float l1 = v1 ? a.softmax_scale * acc[hp][n][2 + c] : kNegInf;
            const float mn = fmaxf(m[hp][n][c], fmaxf(l0, l1));
            if (mn != kNegInf) {
              s[hp][n][c] = s[hp][n][c] * expf(m[hp][n][c] - mn) + (v0 ? expf(l0 - mn) : 0.f) +
                            (v1 ? expf(l1 - mn) : 0.f);
              m[hp][n][c] = mn;
            }
          }
      __syncwarp();
    }
#pragma unroll
    for (int hp = 0; hp < kMaxHP; ++hp)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          for (int o = 4; o < 32; o <<= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m[hp][n][c], o);
            const float s2 = __shfl_xor_sync(0xffffffffu, s[hp][n][c], o);
            lse_merge(m[hp][n][c], s[hp][n][c], m2, s2);
          }
          const int h = hp * 16 + n * 8 + 2 * qq + c;
          if (gq == 0 && h < L.Hp) red[(warp * L.Hp + h) * 2] = m[hp][n][c], red[(warp * L.Hp + h) * 2 + 1] = s[hp][n][c];
        }
    __syncthreads();
    for (int h = tid; h < H; h += kThreads) {
      float mm = kNegInf, ss = 0.f;
      for (int w = 0; w < kWarps; ++w) lse_merge(mm, ss, red[(w * L.Hp + h) * 2], red[(w * L.Hp + h) * 2 + 1]);
      slse[h] = ss > 0.f ? mm + logf(ss) : kNegInf;
    }
    __syncthreads();
  }

  // ---- pass B: Σ T^ and the lse of the indexer scores over the support -----------------------
  // It is warp-local. With T^ given, the warp copies the next tile's k_I rows into a second tile
  // (cp.async) while it computes this one: its own region (kI2), or the dq_I accumulator's,
  // unused until pass C. With T^ and I both given there is nothing to compute per key: it sums
  // over the row's slots.
  const bool two_tiles = kGivenT && (L.LDA != 0 || L.kI2) && kI_vec;
  bf16* const skI2 = reinterpret_cast<bf16*>(smem + (L.kI2 ? L.off_kI2() : L.off_dq()));
  auto tile_of = [&](int step) { return (step + rot) % ntiles; };
  float sumT = 0.f, mI = kNegInf, sI = 0.f;
  const bool given_I = kGivenT && a.scores != nullptr;
  if (given_I)
    for (int j = tid; j < a.K; j += kThreads) {
      const int t = a.indices[size_t(i) * a.K + j];
      if (t < vr.begin || t >= vr.end) continue;  // as key_at: not in S(g)
      sumT += tscratch[size_t(i) * a.K + j];
      lse_merge(mI, sI, a.scores[size_t(i) * a.K + j], 1.f);
    }
  int t_ahead = key_at(tile_of(0));  // the key of the next tile to stage
  if (two_tiles && !given_I) {
    stage_rows(t_ahead, skeys, skI, true);
    mma::cp_async_commit();
    if (ntiles > 1) t_ahead = key_at(tile_of(1));
  }
  for (int step = 0; step < (given_I ? 0 : ntiles); ++step) {
    const int tile = tile_of(step), b = two_tiles ? step & 1 : 0;
    if (two_tiles) {
      if (step + 1 < ntiles) {
        stage_rows(t_ahead, skeys + (b ^ 1) * kTile, b ? skI : skI2, true);
        mma::cp_async_commit();
        mma::cp_async_wait_prior();
        if (step + 2 < ntiles) t_ahead = key_at(tile_of(step + 2));
      } else {
        mma::cp_async_wait_all();
      }
      __syncwarp();  // every lane's copies of this tile have landed
    } else {
      stage(t_ahead);
      if (step + 1 < ntiles) t_ahead = key_at(tile_of(step + 1));
    }
    const RowCtx xb{a, L, sQ, sq, b ? skI2 : skI, skeys + b * kTile, lane, warp, gq, qq};
    float That[2], I[2];
    if constexpr (kGivenT) {
      for (int r = 0; r < 2; ++r) {
        const int j = warp * 16 + gq + 8 * r;
        That[r] = xb.skeys[j] >= 0 ? tscratch[size_t(i) * a.K + tile * kTile + j] : 0.f;
      }
    } else {
      target_tile(xb, slse, That);
    }
    float ua[kIP][2][4];
    u_tile(xb, ua);
    scores_tile(xb, sw, ua, I);
    if (qq == 0)
      for (int r = 0; r < 2; ++r)
        if (xb.skeys[warp * 16 + gq + 8 * r] >= 0) {
          if (!kGivenT && tscratch) tscratch[size_t(i) * a.K + tile * kTile + warp * 16 + gq + 8 * r] = That[r];
          sumT += That[r];
          lse_merge(mI, sI, I[r], 1.f);
        }
    __syncwarp();
  }
  sumT = cta_sum(sumT, sred);
  for (int o = 1; o < 32; o <<= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, mI, o), s2 = __shfl_xor_sync(0xffffffffu, sI, o);
    lse_merge(mI, sI, m2, s2);
  }
  if (lane == 0) red[2 * warp] = mI, red[2 * warp + 1] = sI;
  __syncthreads();
  mI = kNegInf, sI = 0.f;
  for (int w = 0; w < kWarps; ++w) lse_merge(mI, sI, red[2 * w], red[2 * w + 1]);
  __syncthreads();
  if (sI == 0.f) {  // an empty support (every slot invalid): KL 0, no gradient
    no_gradient();
    return;
  }
  if (L.LDA)  // every warp is past pass B (the barriers above): its second k_I tile is free
    for (int e = tid; e < HI * lda; e += kThreads) dq_acc[e] = 0.f;
  const float lseI = mI + logf(sI), normT = fmaxf(sumT, 1e-10f);

  // ---- pass C: KL, dI, du and the gradients ---------------------------------------------------
  float kl = 0.f;
  float dwp[kIP][2][2] = {};
  const int nip = L.HIp / 16, ndc = (L.DIp + 63) / 64;
  // With its own second tile (kI2) pass C stages the next tile's k_I rows while it computes this
  // one, as pass B does; the barrier that ends each tile frees the buffer the copies go to.
  const bool two_tiles_c = L.kI2 && kI_vec;
  t_ahead = key_at(tile_of(0));
  if (two_tiles_c) {
    stage_rows(t_ahead, skeys, skI, true);
    mma::cp_async_commit();
    if (ntiles > 1) t_ahead = key_at(tile_of(1));
  }
  for (int step = 0; step < ntiles; ++step) {
    const int tile = tile_of(step), b = two_tiles_c ? step & 1 : 0;
#if DSA_MUTANT_streaming_kl_drop_last_chunk
    if (!a.dense && tile == ntiles - 1) break;  // planted: the last key tile of the row is skipped
#endif
    if (two_tiles_c) {
      if (step + 1 < ntiles) {
        stage_rows(t_ahead, skeys + (b ^ 1) * kTile, b ? skI : skI2, true);
        mma::cp_async_commit();
        mma::cp_async_wait_prior();
        if (step + 2 < ntiles) t_ahead = key_at(tile_of(step + 2));
      } else {
        mma::cp_async_wait_all();
      }
      __syncwarp();
    } else {
      stage(t_ahead);
      if (step + 1 < ntiles) t_ahead = key_at(tile_of(step + 1));
    }
    const int* const ck = skeys + b * kTile;  // this tile's keys and k_I rows
    const bf16* const ckI = b ? skI2 : skI;
    const RowCtx xc{a, L, sQ, sq, ckI, ck, lane, warp, gq, qq};
    float That[2], I[2], dI[2];
    if (tscratch) {  // sparse: T^ of each slot was kept by pass B (or handed in)
      for (int r = 0; r < 2; ++r) {
        const int j = warp * 16 + gq + 8 * r;
        That[r] = ck[j] >= 0 ? tscratch[size_t(i) * a.K + tile * kTile + j] : 0.f;
      }
    } else if constexpr (!kGivenT) {
      target_tile(xc, slse, That);
    }
    float ua[kIP][2][4];
    u_tile(xc, ua);
    if (given_I)  // the values lse(I) came from
      for (int r = 0; r < 2; ++r) {
        const int j = warp * 16 + gq + 8 * r;
        I[r] = ck[j] >= 0 ? a.scores[size_t(i) * a.K + tile * kTile + j] : 0.f;
      }
    else
      scores_tile(xc, sw, ua, I);
    bool valid[2];
    for (int r = 0; r < 2; ++r) {
      valid[r] = ck[warp * 16 + gq + 8 * r] >= 0;
      const float T = That[r] / normT, logQ = I[r] - lseI, Q = expf(logQ);
      dI[r] = valid[r] ? a.coeff_over_N * (Q - T) : 0.f;
#if DSA_MUTANT_kl_reversed
      if (valid[r] && qq == 0) kl += Q * (logQ - logf(fmaxf(T, 1e-10f)));  // planted: KL(Q‖T)
#else
      if (valid[r] && qq == 0 && T > 0.f) kl += T * (logf(fmaxf(T, 1e-10f)) - logQ);
#endif
    }
    // du = bf16(dI·w·φ'(u)) into shared memory ([key][head]); dw partials in registers.
#pragma unroll
    for (int ip = 0; ip < kIP; ++ip)
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const int h = ip * 16 + n * 8 + 2 * qq;
        if (ip < nip) {
          float du[2][2];
#pragma unroll
          for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const float u = ua[ip][n][2 * r + c];
              const bool ok = valid[r] && h + c < HI;
              du[r][c] = ok ? dI[r] * sw[h + c] * dphi(u, a.relu) : 0.f;
              if (ok) dwp[ip][n][c] += dI[r] * phi(u, a.relu);
            }
#pragma unroll
          for (int r = 0; r < 2; ++r)
            *reinterpret_cast<uint32_t*>(sdu + size_t(warp * 16 + gq + 8 * r) * L.LDU + h) = mma::pack_bf16(du[r][0], du[r][1]);
        }
      }
    __syncwarp();
    // dk_I[t] += Σ_h du[t,h]·q_I[g,h] for the warp's keys, 64 dims at a time.
    for (int dc = 0; dc < ndc; ++dc) {
      float acc[8][4] = {};
      for (int j = 0; j < nip; ++j) {
        uint32_t af[4];
        mma::ldmatrix_x4(af, sdu + size_t(warp * 16 + mma::a_row(lane)) * L.LDU + j * 16 + mma::a_col(lane));
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          const int n0 = dc * 64 + np * 16;
          if (n0 < L.DIp) {
            uint32_t b[4];
            mma::ldmatrix_x4_trans(b, sq + size_t(j * 16 + mma::a_row(lane)) * L.LDI + n0 + mma::a_col(lane));
            mma::mma_bf16(acc[2 * np], af, b[0], b[1]);
            mma::mma_bf16(acc[2 * np + 1], af, b[2], b[3]);
          }
        }
      }
#if __CUDA_ARCH__ >= 900
      if (dk_vec) {  // lane pairs swap halves so that each lane adds 4 consecutive dims of one key
        const bool odd = qq & 1;
        const int t = ck[warp * 16 + gq + (odd ? 8 : 0)];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const float s0 = odd ? acc[nt][0] : acc[nt][2], s1 = odd ? acc[nt][1] : acc[nt][3];
          const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
          const int d = dc * 64 + nt * 8 + 2 * (qq & 2);
          const float4 v = odd ? make_float4(r0, r1, acc[nt][2], acc[nt][3]) : make_float4(acc[nt][0], acc[nt][1], r0, r1);
          if (t >= 0 && d < DI) atomicAdd(reinterpret_cast<float4*>(a.dk_I + size_t(t) * DI + d), v);
        }
        continue;
      }
#endif
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int t = ck[warp * 16 + gq + 8 * r];
        if (t < 0) continue;
        float* dst = a.dk_I + size_t(t) * DI;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int d = dc * 64 + nt * 8 + 2 * qq + c;
            if (d < DI) atomicAdd(dst + d, acc[nt][2 * r + c]);
          }
      }
    }
    __syncthreads();  // every warp's du and k_I rows are in shared memory
    // dq_I[g] += duᵀ·k_I over the tile's 128 keys; warp w owns blocks w, w+8, … of (16 heads × kDQW
    // dims). kDQW = 64, or 32 at HI ≤ 32, where 64-wide blocks would leave half the warps idle (four
    // for eight warps at DI 128; 32-wide: −6 % loss time on the H100 at GLM-5, S = 4096 and 16384).
    constexpr int kDQW = kIP <= 2 ? 32 : 64, nnp = kDQW / 16;
    const int nqc = (L.DIp + kDQW - 1) / kDQW;
    for (int item = warp; item < nip * nqc; item += kWarps) {
      const int mh = item / nqc, dc = item % nqc;
      float acc[8][4] = {};
      for (int kk = 0; kk < kTile / 16; ++kk) {
        uint32_t af[4];
        mma::ldmatrix_x4_trans(af, sdu + size_t(kk * 16 + mma::bnk_row(lane)) * L.LDU + mh * 16 + mma::bnk_col(lane));
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          const int n0 = dc * kDQW + np * 16;
          if (np < nnp && n0 < L.DIp) {
            uint32_t b[4];
            mma::ldmatrix_x4_trans(b, ckI + size_t(kk * 16 + mma::a_row(lane)) * L.LDI + n0 + mma::a_col(lane));
            mma::mma_bf16(acc[2 * np], af, b[0], b[1]);
            mma::mma_bf16(acc[2 * np + 1], af, b[2], b[3]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int h = mh * 16 + gq + 8 * r;
        if (h >= HI) continue;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          if (nt >= 2 * nnp) break;  // the next item's columns (another warp's)
          const int d = dc * kDQW + nt * 8 + 2 * qq;
          float* p = dq_acc + size_t(h) * lda + d;
          if (dq_vec) {  // d even, DI even: d < DI means the pair is in
            if (d < DI) {
              float2 v = *reinterpret_cast<float2*>(p);
              v.x += acc[nt][2 * r];
              v.y += acc[nt][2 * r + 1];
              *reinterpret_cast<float2*>(p) = v;
            }
          } else {
#pragma unroll
            for (int c = 0; c < 2; ++c)
              if (d + c < DI) p[c] += acc[nt][2 * r + c];
          }
        }
      }
    }
    __syncthreads();  // before the next tile overwrites the staged keys
  }
  if (two_tiles_c) mma::cp_async_wait_all();  // (only a planted early exit leaves copies in flight)

  if (L.LDA)  // the tile loop ended on a barrier: every warp's last additions are in
    for (int e = tid; e < HI * DI; e += kThreads) dq_row[e] = dq_acc[size_t(e / DI) * lda + e % DI];

  // dw: lanes of one quad column share heads; reduce over g, then over warps in a fixed order.
#pragma unroll
  for (int ip = 0; ip < kIP; ++ip)
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float v = dwp[ip][n][c];
        for (int o = 4; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        const int h = ip * 16 + n * 8 + 2 * qq + c;
        if (gq == 0 && h < L.HIp) red[warp * L.HIp + h] = v;
      }
  __syncthreads();
  for (int h = tid; h < HI; h += kThreads) {
    float v = 0.f;
    for (int w = 0; w < kWarps; ++w) v += red[w * L.HIp + h];
    a.dw[size_t(i) * HI + h] = v;
  }
  kl = cta_sum(kl, sred);
  if (tid == 0) a.kl[i] = kl;
}

__global__ void zero_kernel(float* p, size_t n) {
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) p[e] = 0.f;
}

}  // namespace

void indexer_loss(const LossArgs& a, cudaStream_t s) {
  require(a.H >= 1 && a.H <= 16 * kMaxHP, "H", "between 1 and 128 in the fused indexer loss");
  require(a.HI >= 1 && a.HI <= 16 * kMaxIP, "HI", "between 1 and 128 in the fused indexer loss");
  require(a.DI >= 1 && a.C >= 0 && a.R >= 0 && a.C + a.R >= 1, "C", "C + R and DI at least 1");
  if (a.Tp > 0) {
    const size_t n = size_t(a.Tp) * a.DI;
    zero_kernel<<<int(std::min<size_t>((n + 255) / 256, 2048)), 256, 0, s>>>(a.dk_I, n);
    DSA_CUDA_CHECK(cudaGetLastError());
  }
  if (a.Tq <= 0) return;
  LossLayout L{};
  const bool given = !a.dense && a.target != nullptr;  // T^ handed in: no Q~ in shared memory
  L.Hp = round_up(a.H, 16);
  L.CRp = round_up(a.C + a.R, 16);
  L.LDQ = given ? 0 : L.CRp + 8;
  L.HIp = round_up(a.HI, 16);
  L.DIp = round_up(a.DI, 16);
  L.LDI = L.DIp + 8;
  L.LDU = L.HIp + 8;
  const auto kernel = !given       ? indexer_loss_kernel<false, kMaxIP>
                     : L.HIp <= 32 ? indexer_loss_kernel<true, 2>
                     : L.HIp <= 64 ? indexer_loss_kernel<true, 4>
                                   : indexer_loss_kernel<true, kMaxIP>;
  int dev = 0, optin = 0, per_sm = 0, reserved = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&dev));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
  cudaFuncAttributes fa{};
  DSA_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
  const size_t budget = size_t(optin) - fa.sharedSizeBytes;  // less the kernel's static shared memory
  if (given) {  // the running dq_I in shared memory (and a second k_I tile) if two CTAs still fit an SM
    auto two_fit = [&](const LossLayout& l) {  // static part and reserve included
      return 2 * (l.bytes() + fa.sharedSizeBytes + size_t(reserved)) <= size_t(per_sm);
    };
    LossLayout with = L;
    with.LDA = L.DIp + 8;
    LossLayout piped = with;
    piped.kI2 = 1;
    if (two_fit(piped)) L = piped;
    else if (two_fit(with)) L = with;
  }
  if (L.bytes() > budget)
    throw InvalidInput("H", "H·(C+R) = " + std::to_string(a.H) + "·" + std::to_string(a.C + a.R) +
                                " needs more shared memory than the fused indexer loss has");
  DSA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(L.bytes())));
  if (given) {
    kernel<<<a.Tq, kThreads, L.bytes(), s>>>(a, L, a.target);
    DSA_CUDA_CHECK(cudaGetLastError());
    return;
  }
  float* tscratch = nullptr;  // sparse: T^ per index slot, [Tq, K'] fp32 (stream-ordered allocation)
  if (!a.dense && a.K > 0) DSA_CUDA_CHECK(cudaMallocAsync(&tscratch, size_t(a.Tq) * a.K * sizeof(float), s));
  kernel<<<a.Tq, kThreads, L.bytes(), s>>>(a, L, tscratch);
  const cudaError_t launched = cudaGetLastError();
  if (tscratch) DSA_CUDA_CHECK(cudaFreeAsync(tscratch, s));
  DSA_CUDA_CHECK(launched);
}

}  // namespace dsa::fused
