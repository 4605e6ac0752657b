// Sparse MLA attention forward (SPEC.md §5) on Hopper warpgroup tensor cores (wgmma, sm_90a), for
// the production latent width C = 512 with C + R ≤ 576. Same contract and the same rounding points
// as the mma.sync kernel of attention_fwd.cu, which serves every other shape and device.
//
// One CTA = one query row × a block of 64 heads, three warpgroups, warp-specialized:
//   producer (warpgroup 2): gathers the selected key rows K~ = [c; k_pe] with cp.async into two
//     128-byte-swizzled 64-key buffers, each in two parts with their own mbarriers (L: latent
//     columns 0–255, R: 256–575), so that a part is reloaded as soon as its last reader is done;
//   consumers (warpgroups 0 and 1): the keys go in pairs of 64-key blocks, the even block in
//     buffer 0 and the odd one in buffer 1. Warpgroup w computes S = Q~·K~ᵀ of its block for all
//     64 heads (m64n64k16, A and B from shared memory) and its softmax; the output columns are
//     split instead: warpgroup 0 owns latent columns 0–255 of O, warpgroup 1 256–511, so each
//     multiplies its own P from registers (m64n256k16, A in registers) and the other's P from
//     shared memory with its half of V = c of both blocks.
// The row max goes warpgroup 0 → 1 through shared memory: 1 takes the max of both blocks, and 0
// corrects its own P·V (issued with its block's max) by one factor before it shares P. Rows are
// visited latest first: they select the most keys, so the tail is short. FlashMLA's SM90 sparse
// prefill (deepseek-ai/FlashMLA) has this structure; this is our own code of it.
#include <cmath>
#include "fused/attention_fwd_sm90.hpp"
#include "fused/cuda_check.hpp"
#include "fused/device.hpp"
#include "fused/mma.cuh"
#include "fused/pipeline.cuh"
#include "fused/softmax_rows.cuh"
#include "fused/wgmma.cuh"

namespace dsa::fused {

namespace {

// [[maybe_unused]]: the compute_80 pass compiles the kernel body out, and with it their only uses.
constexpr int HB = 64;                                 // heads per CTA (the wgmma M)
[[maybe_unused]] constexpr int BN = 64;                // keys per block
constexpr int ATOMS = 9;                               // 64-column atom columns of the query width: C + R ≤ 576
constexpr int ATOM_BYTES = 64 * 128;                   // one atom column of a 64-row tile
constexpr int TILE_BYTES = ATOMS * ATOM_BYTES;
constexpr int NTHREADS = 384;
static_assert(HB == 64, "wgmma::load_head_block loads 64-row head blocks");
[[maybe_unused]] constexpr int kSplit = 4;             // atoms of part L of a key buffer (latent 0–255)
[[maybe_unused]] constexpr float kLog2e = 1.4426950408889634f;
[[maybe_unused]] constexpr float kLn2 = 0.6931471805599453f;

// Named barriers between the two consumer warpgroups (256 threads).
[[maybe_unused]] constexpr int BAR_MAX0 = 1;  // warpgroup 0's block max is in sMax
[[maybe_unused]] constexpr int BAR_MAX1 = 2;  // the pair's max (both blocks) is in sMax
[[maybe_unused]] constexpr int BAR_P0 = 3;    // P of the even block is in sP0
[[maybe_unused]] constexpr int BAR_P1 = 4;    // P of the odd block is in sP1
[[maybe_unused]] constexpr int BAR_SUM = 5;   // the row sums of both are in sSum

// Shared memory: Q~ block, two key buffers, P of the odd block (P of the even one overwrites the
// dead rope atom of buffer 0 once warpgroup 0's S is done), the row max / row sum exchange and
// eight mbarriers; the base is rounded up to 1024 bytes (the swizzle atom), hence the slack.
[[maybe_unused]] constexpr int OFF_Q = 0, OFF_K0 = TILE_BYTES, OFF_K1 = 2 * TILE_BYTES;
constexpr int OFF_P1 = 3 * TILE_BYTES;
constexpr int OFF_MAX = OFF_P1 + ATOM_BYTES;
constexpr int OFF_SUM = OFF_MAX + HB * (int)sizeof(float);
constexpr int OFF_BAR = OFF_SUM + 2 * HB * (int)sizeof(float);
constexpr int SMEM_BYTES = OFF_BAR + 8 * (int)sizeof(uint64_t) + 1024;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The producer's share of atoms [a0, a1) of a 64-key block: thread p copies 16-byte chunk p % 8 of
// rows p / 8 + 16·i; key t[i] of the row, zeros where the slot is past the count or the column past
// C + R.
__device__ __forceinline__ void load_key_part(unsigned char* buf, int a0, int a1, const int64_t (&t)[4],
                                              const bool (&valid)[4], int p, const AttnFwdArgs& a) {
  const int ch = p & 7, D = a.C + a.R;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = (p >> 3) + 16 * i;
    for (int atom = a0; atom < a1; ++atom) {
      const int col = atom * 64 + ch * 8;
      const bool ok = valid[i] && col < D;
      const bf16* src = !ok ? a.c : col < a.C ? a.c + t[i] * a.C + col : a.k_pe + t[i] * a.R + (col - a.C);
      pipeline::cp_async16_or_zero(buf + atom * ATOM_BYTES + wgmma::swizzled(r, ch), src, ok);
    }
  }
}

// P (this lane's rows r0, r0 + 8 of a 64×64 block, the accumulator layout) times f, as bf16 into
// the swizzled tile sP.
__device__ __forceinline__ void store_p(unsigned char* sP, const float (&s)[32], const float (&f)[2], int r0, int q) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int col = j * 8 + 2 * q;
#pragma unroll
    for (int r = 0; r < 2; ++r)
      *reinterpret_cast<uint32_t*>(sP + wgmma::swizzled(r0 + 8 * r, col >> 3) + (col & 7) * 2) =
          mma::pack_bf16(s[4 * j + 2 * r] * f[r], s[4 * j + 2 * r + 1] * f[r]);
  }
}

// O += P·V over the 64 keys of a block, P from registers (bf16 of s, the m64k16 A fragments). The
// 16 fragments are packed before the fence: packed between the wgmmas, each would need a
// warpgroup.arrive of its own, which ptxas injects (1.7 % of the kernel's time on an H100).
__device__ __forceinline__ void pv_from_registers(float (&o)[128], const float (&s)[32], uint64_t dV) {
  uint32_t af[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) af[i] = mma::pack_bf16(s[2 * i], s[2 * i + 1]);
  wgmma::fence();
#pragma unroll
  for (int ks = 0; ks < BN / 16; ++ks) {
    const uint32_t a4[4] = {af[4 * ks], af[4 * ks + 1], af[4 * ks + 2], af[4 * ks + 3]};
    wgmma::mma_m64n256k16_rs(o, a4, wgmma::advance(dV, ks * 16 * 128));
  }
  wgmma::commit();
}

// O += P·V with P (bf16) from the swizzled tile of descriptor dP.
__device__ __forceinline__ void pv_from_shared(float (&o)[128], uint64_t dP, uint64_t dV) {
  wgmma::fence();
#pragma unroll
  for (int ks = 0; ks < BN / 16; ++ks)
    wgmma::mma_m64n256k16<0, 1>(o, wgmma::advance(dP, ks * 32), wgmma::advance(dV, ks * 16 * 128), 1);
  wgmma::commit();
}

// S (+)= Q~·K~ᵀ over atoms [a0, a1) of the query width (the padding is zeros); `fresh`: S starts
// here (the first product overwrites it).
__device__ __forceinline__ void qk_atoms(float (&s)[32], uint64_t dQ, uint64_t dK, int a0, int a1, bool fresh) {
#pragma unroll
  for (int atom = a0; atom < a1; ++atom)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t off = atom * ATOM_BYTES + k * 32;
      wgmma::mma_m64n64k16(s, wgmma::advance(dQ, off), wgmma::advance(dK, off), !fresh || atom > a0 || k > 0);
    }
}

// The kernel's shared memory, as the consumers see it.
struct Shared {
  unsigned char *Q, *K0, *K1, *P0, *P1;
  float *max, *sum;
  uint64_t *ready, *empty;
};

// A consumer warpgroup's whole work for its row and head block (the file's comment): S of its
// block of each pair, the softmax, its 256 output columns, and the epilogue.
template <int WG>
__device__ __forceinline__ void consume(const AttnFwdArgs& a, const Shared& sm, int row, int h0, int cnt, int npairs) {
  unsigned char *const sQ = sm.Q, *const sK0 = sm.K0, *const sK1 = sm.K1, *const sP0 = sm.P0, *const sP1 = sm.P1;
  float *const sMax = sm.max, *const sSum = sm.sum;
  uint64_t *const ready = sm.ready, *const empty = sm.empty;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, q = lane & 3;
  const int r0 = warp * 16 + (lane >> 2);  // this lane's rows r0 and r0 + 8 of the head block
  const float sl2 = a.scale * kLog2e;
  const bool one_block = cnt <= BN;
  const uint64_t dQ = wgmma::desc(sQ, 16, 1024);
  const uint64_t dK = wgmma::desc(WG == 0 ? sK0 : sK1, 16, 1024);  // this warpgroup's block, K-major
  // V = the first C columns of the key buffers read MN-major: this warpgroup's 256 columns of both.
  const uint64_t dV_own = wgmma::desc((WG == 0 ? sK0 : sK1) + WG * kSplit * ATOM_BYTES, ATOM_BYTES, 1024);
  const uint64_t dV_other = wgmma::desc((WG == 0 ? sK1 : sK0) + WG * kSplit * ATOM_BYTES, ATOM_BYTES, 1024);
  const uint64_t dP_other = wgmma::desc(WG == 0 ? sP1 : sP0, 16, 1024);

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

  // S of warpgroup 0's block of a pair: buffer 0 in the producer's order, L then R, each part its
  // own group.
  float s[32];
  auto qk_even_part = [&](bool left, uint32_t parity) {
    wgmma::fence();
    pipeline::mbarrier_wait(&ready[left ? 0 : 1], parity);
    qk_atoms(s, dQ, dK, left ? 0 : kSplit, left ? kSplit : ATOMS, left);
    wgmma::commit();
  };
  if constexpr (WG == 0)
    if (npairs > 0) {
      qk_even_part(true, 0);
      qk_even_part(false, 0);
      wgmma::wait<0>();
      wgmma::fence_registers(s);
    }

  for (int pair = 0; pair < npairs; ++pair) {
    const uint32_t parity = pair & 1;
    const int base = pair * 2 * BN + WG * BN;  // the first slot of this warpgroup's block
    if constexpr (WG == 1) {  // buffer 1: R, then L (warpgroup 0's S came with the pair before)
      wgmma::fence();
      pipeline::mbarrier_wait(&ready[3], parity);
      qk_atoms(s, dQ, dK, kSplit, ATOMS, true);
      pipeline::mbarrier_wait(&ready[2], parity);
      qk_atoms(s, dQ, dK, 0, kSplit, false);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_registers(s);
    }

    // Scale into the log2 domain; slots past the count are masked (−inf). d[4j + e] is row
    // r0 + 8·(e / 2), key column 8j + 2q + e % 2 of the block.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int slot = base + (i >> 2) * 8 + 2 * q + (i & 1);
      s[i] = slot < cnt ? s[i] * sl2 : -INFINITY;
      mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
    }
    softmax::quad_reduce(mx, softmax::Max{});

    if constexpr (WG == 0) {
      // The even block always holds a valid slot: its max is finite.
      float m0[2], alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        m0[r] = fmaxf(m_run[r], mx[r]);
        alpha[r] = exp2f(m_run[r] - m0[r]);
        l_run[r] *= alpha[r];
      }
      if (q == 0) sMax[r0] = m0[0], sMax[r0 + 8] = m0[1];
      pipeline::bar_arrive(BAR_MAX0, 256);
      float part[2] = {0.f, 0.f};
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        s[i] = exp2f(s[i] - m0[(i >> 1) & 1]);
        part[(i >> 1) & 1] += s[i];
      }
      l_run[0] += part[0], l_run[1] += part[1];
      if (one_block) {
        // A row whose keys fit one block: its lse is known now, so P = exp(logit − lse) is rounded
        // to bf16 already normalized, exactly where SPEC.md §8 (and the lowp reference) rounds it.
        float l[2] = {part[0], part[1]};
        softmax::quad_reduce(l, softmax::Sum{});
#pragma unroll
        for (int i = 0; i < 32; ++i) s[i] = s[i] / l[(i >> 1) & 1];
      }
#pragma unroll
      for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
      pv_from_registers(o, s, dV_own);
      wgmma::wait<0>();
      wgmma::fence_registers(o);
      pipeline::mbarrier_arrive(&empty[0]);  // 0L: its last reader was this P·V

      // The pair's max, from warpgroup 1: one factor corrects what was accumulated with m0.
      pipeline::bar_sync(BAR_MAX1, 256);
      float f[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m = sMax[r0 + 8 * r];
        f[r] = exp2f(m0[r] - m);
        m_run[r] = m;
        l_run[r] *= f[r];
      }
      store_p(sP0, s, f, r0, q);
      wgmma::fence_proxy_async();
      pipeline::bar_arrive(BAR_P0, 256);
#pragma unroll
      for (int i = 0; i < 128; ++i) o[i] *= f[(i >> 1) & 1];
      pipeline::bar_sync(BAR_P1, 256);
      pv_from_shared(o, dP_other, dV_other);
      if (pair + 1 < npairs) {
        // The next pair's S goes beside this P·V: its L part first (released by the first P·V,
        // so likely loaded); 1L is released once this P·V is done, before S's R part, which waits
        // for warpgroup 1's second P·V to release it.
        qk_even_part(true, parity ^ 1);
        wgmma::wait<1>();
        pipeline::mbarrier_arrive(&empty[2]);
        qk_even_part(false, parity ^ 1);
        wgmma::wait<0>();
        wgmma::fence_registers(s);
      } else {
        wgmma::wait<0>();
        pipeline::mbarrier_arrive(&empty[2]);  // 1L: its last reader was this P·V
      }
      wgmma::fence_registers(o);
    } else {
      pipeline::bar_sync(BAR_MAX0, 256);
      float m[2], alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        m[r] = fmaxf(sMax[r0 + 8 * r], mx[r]);  // ≥ the previous pair's max, which sMax's value includes
        alpha[r] = exp2f(m_run[r] - m[r]);
        m_run[r] = m[r];
        l_run[r] *= alpha[r];
      }
      __syncwarp();  // the row's 4 lanes have read warpgroup 0's value (the rows are this warp's)
      if (q == 0) sMax[r0] = m[0], sMax[r0 + 8] = m[1];
      pipeline::bar_arrive(BAR_MAX1, 256);
      float part[2] = {0.f, 0.f};
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        s[i] = exp2f(s[i] - m[(i >> 1) & 1]);
        part[(i >> 1) & 1] += s[i];
      }
      l_run[0] += part[0], l_run[1] += part[1];
#pragma unroll
      for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
      pv_from_registers(o, s, dV_own);
      const float one[2] = {1.f, 1.f};
      store_p(sP1, s, one, r0, q);  // while that P·V runs
      wgmma::fence_proxy_async();
      pipeline::bar_arrive(BAR_P1, 256);
      pipeline::bar_sync(BAR_P0, 256);
      pv_from_shared(o, dP_other, dV_other);
      wgmma::wait<1>();
      pipeline::mbarrier_arrive(&empty[3]);  // 1R: its last reader was the first P·V
      wgmma::wait<0>();
      wgmma::fence_registers(o);
      pipeline::mbarrier_arrive(&empty[1]);  // 0R (and P of the even block): the second
    }
  }

  // Row sums: the 4 lanes of a group, then the two warpgroups (one-block rows were normalized).
  float l[2] = {l_run[0], l_run[1]};
  softmax::quad_reduce(l, softmax::Sum{});
  if (q == 0) sSum[WG * HB + r0] = l[0], sSum[WG * HB + r0 + 8] = l[1];
  pipeline::bar_sync(BAR_SUM, 256);
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = sSum[r0 + 8 * r] + sSum[HB + r0 + 8 * r];
    inv[r] = one_block ? 1.f : l[r] > 0.f ? 1.f / l[r] : 0.f;
    const int h = h0 + r0 + 8 * r;
    if (WG == 0 && q == 0 && h < a.H)
      a.lse[(int64_t)row * a.H + h] = cnt == 0 || !(l[r] > 0.f) ? -INFINITY : (m_run[r] + log2f(l[r])) * kLn2;
  }
#pragma unroll
  for (int n8 = 0; n8 < 32; ++n8) {
    const int col = WG * 256 + n8 * 8 + 2 * q;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = h0 + r0 + 8 * r;
      if (h >= a.H) continue;
      bf16* dst = a.O_lat + ((int64_t)row * a.H + h) * a.C;
      *reinterpret_cast<__nv_bfloat162*>(dst + col) =
          __floats2bfloat162_rn(o[4 * n8 + 2 * r] * inv[r], o[4 * n8 + 2 * r + 1] * inv[r]);
    }
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

__global__ void __launch_bounds__(NTHREADS, 1) attention_forward_sm90_kernel(AttnFwdArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  unsigned char* sQ = smem + OFF_Q;
  unsigned char* sK0 = smem + OFF_K0;
  unsigned char* sK1 = smem + OFF_K1;
  unsigned char* sP0 = sK0 + 8 * ATOM_BYTES;  // the rope atom of buffer 0, dead once its S is done
  unsigned char* sP1 = smem + OFF_P1;
  float* sMax = reinterpret_cast<float*>(smem + OFF_MAX);  // [HB]
  float* sSum = reinterpret_cast<float*>(smem + OFF_SUM);  // [2][HB]
  uint64_t* ready = reinterpret_cast<uint64_t*>(smem + OFF_BAR);  // [buffer][part L, R]
  uint64_t* empty = ready + 4;                                    // likewise: the part may be reloaded

  const int row = a.Tq - 1 - blockIdx.x, h0 = blockIdx.y * HB;
  const int cnt = a.count[row];
  const int npairs = (cnt + 2 * BN - 1) / (2 * BN);
  // Warp-uniform to the compiler (a broadcast), or it serializes every wgmma after the role branch.
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x >> 7), 0);

  if (threadIdx.x == 0)
    for (int i = 0; i < 8; ++i) pipeline::mbarrier_init(&ready[i], 128);
  wgmma::load_head_block<NTHREADS>(sQ, a.Qt, row, h0, a.H, a.C + a.R, ATOMS);
  mma::cp_async_commit();
  mma::cp_async_wait_all();
  wgmma::fence_proxy_async();  // Q~ and its zero fills, seen by the async proxy
  __syncthreads();             // and the barriers initialized

  if (wg == 2) {  // ---- producer ----
    pipeline::regs_shrink<56>();
    const int p = threadIdx.x - 256;
    const int32_t* sel = a.sel + (int64_t)row * a.K;
    for (int pair = 0; pair < npairs; ++pair) {
      const uint32_t parity = (pair & 1) ^ 1;  // the previous pair's release (passes on the first)
      int64_t t0[4], t1[4];
      bool v0[4], v1[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int slot = pair * 2 * BN + (p >> 3) + 16 * i;
        v0[i] = slot < cnt, v1[i] = slot + BN < cnt;
        t0[i] = v0[i] ? sel[slot] : 0, t1[i] = v1[i] ? sel[slot + BN] : 0;
      }
      // In the order the consumers release them: 0L (warpgroup 0's own P·V), 1R (1's own), 0R
      // (1's shared P·V), 1L (0's shared P·V).
      pipeline::mbarrier_wait(&empty[0], parity);
      load_key_part(sK0, 0, kSplit, t0, v0, p, a);
      pipeline::cp_async_arrive(&ready[0]);
      pipeline::mbarrier_wait(&empty[3], parity);
      load_key_part(sK1, kSplit, ATOMS, t1, v1, p, a);
      pipeline::cp_async_arrive(&ready[3]);
      pipeline::mbarrier_wait(&empty[1], parity);
      load_key_part(sK0, kSplit, ATOMS, t0, v0, p, a);
      pipeline::cp_async_arrive(&ready[1]);
      pipeline::mbarrier_wait(&empty[2], parity);
      load_key_part(sK1, 0, kSplit, t1, v1, p, a);
      pipeline::cp_async_arrive(&ready[2]);
    }
    return;
  }

  // ---- consumers: one body per warpgroup, so that no accumulator lives across a branch ----
  pipeline::regs_grow<224>();
  const Shared sh{sQ, sK0, sK1, sP0, sP1, sMax, sSum, ready, empty};
  if (wg == 0)
    consume<0>(a, sh, row, h0, cnt, npairs);
  else
    consume<1>(a, sh, row, h0, cnt, npairs);
#else
  __trap();  // never launched: the host dispatches here only when sm_90a code was compiled
#endif
}

}  // namespace

bool attention_forward_sm90_fits(const AttnFwdArgs& a) {
  static_assert(ATOMS * 64 == 576, "sm90a_latent_width's C + R bound is this kernel's atom count");
  return sm90a_latent_width(a.C, a.R) && sm90a_kernel_fits(reinterpret_cast<const void*>(attention_forward_sm90_kernel), SMEM_BYTES);
}

void attention_forward_sm90(const AttnFwdArgs& a, cudaStream_t s) {
  DSA_CUDA_CHECK(cudaFuncSetAttribute(attention_forward_sm90_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      SMEM_BYTES));
  const dim3 grid(a.Tq, (a.H + HB - 1) / HB);
  attention_forward_sm90_kernel<<<grid, NTHREADS, SMEM_BYTES, s>>>(a);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::fused
