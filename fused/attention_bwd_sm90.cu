// Sparse MLA attention backward (SPEC.md §6) on Hopper warpgroup tensor cores (wgmma, sm_90a), for
// the production latent width C = 512 with C + R ≤ 576. Same contract and the same rounding points
// as the mma.sync kernel of attention_bwd.cu (P recomputed from the forward's lse, P and dlogit
// rounded to bf16 before their products, dK~ accumulated with fp32 atomics over queries).
//
// One CTA = one query row × a block of 64 heads, two warpgroups, walking the row's selected keys in
// tiles of 32 (double-buffered cp.async gathers by all 256 threads, each thread's key read a tile
// ahead). Per tile:
//   phase 1: warpgroup 0 computes S = Q~·K~ᵀ (m64n32, K-dim C+R), warpgroup 1 dP = dO_lat·Ṽᵀ
//     (K-dim C) and hands it over in shared memory; warpgroup 0 forms P and dS = P·(dP − Δ) and
//     stores both as bf16 tiles [head][key];
//   phase 2, split so that each warpgroup has the same number of products:
//     dQ~ += dS·K~ (registers over all tiles; A = dS K-major, B = the key tile MN-major):
//       warpgroup 0 owns columns 0–319, warpgroup 1 320–575;
//     dK~ᵀ of the tile, one 64-column slice d at a time: Q~ᵀ_d·dS (+ dO_latᵀ_d·P for d < 8), A
//       and B both read MN-major from the head-major tiles, so no transposed copy is stored;
//       warpgroup 0 takes slices 0–3, warpgroup 1 4–8; added to global dK~ with float2 atomics;
//     dQ~'s product is issued after the last slice's, to run under that slice's atomics.
// Shared memory is what bounds the tile: Q~ (72 KiB), dO_lat (64 KiB), two key tiles (72 KiB), dS
// and P (8 KiB each; P overwrites the dP hand-over once it has been read).
#include <cmath>

#include "fused/attention_bwd_sm90.hpp"
#include "fused/cuda_check.hpp"
#include "fused/device.hpp"
#include "fused/mma.cuh"
#include "fused/pipeline.cuh"
#include "fused/wgmma.cuh"

namespace dsa::fused {

namespace {

// [[maybe_unused]]: the compute_80 pass compiles the kernel body out, and with it their only uses.
constexpr int HB = 64;                          // heads per CTA (the wgmma M of S, dP, dQ~)
[[maybe_unused]] constexpr int BN = 32;         // keys per tile
constexpr int ATOMS = 9;                        // 64-column atom columns of the query width: C + R ≤ 576
[[maybe_unused]] constexpr int LAT_ATOMS = 8;   // of the latent width C = 512
constexpr int H_ATOM = HB * 128;                // one atom column of a 64-row (head) tile
constexpr int K_ATOM = BN * 128;                // one atom column of a 32-row (key) tile
constexpr int NTHREADS = 256;
static_assert(HB == 64, "wgmma::load_head_block loads 64-row head blocks");
[[maybe_unused]] constexpr int DQ_SPLIT = 5;    // warpgroup 0's dQ~ atoms; warpgroup 1 has the other 4
[[maybe_unused]] constexpr int DK_SPLIT = 4;    // warpgroup 0's dK~ slices; warpgroup 1 has the other 5
[[maybe_unused]] constexpr float kLog2e = 1.4426950408889634f;

[[maybe_unused]] constexpr int BAR_DP = 1;       // warpgroup 1's dP is in the hand-over
[[maybe_unused]] constexpr int BAR_DP_READ = 2;  // warpgroup 0 has read all of it (P may overwrite it)

constexpr int OFF_Q = 0;
constexpr int OFF_DO = OFF_Q + ATOMS * H_ATOM;
constexpr int OFF_K0 = OFF_DO + LAT_ATOMS * H_ATOM;
constexpr int OFF_K1 = OFF_K0 + ATOMS * K_ATOM;
constexpr int OFF_DS = OFF_K1 + ATOMS * K_ATOM;
constexpr int OFF_P = OFF_DS + H_ATOM;  // also the dP hand-over (64 × 32 fp32, the same 8 KiB)
constexpr int OFF_LSE = OFF_P + H_ATOM;
constexpr int OFF_DELTA = OFF_LSE + HB * (int)sizeof(float);
constexpr int OFF_TARGET = OFF_DELTA + HB * (int)sizeof(float);
constexpr int OFF_IDX = OFF_TARGET + 4 * BN * (int)sizeof(float);
constexpr int SMEM_BYTES = OFF_IDX + 2 * BN * (int)sizeof(int32_t) + 1024;  // + the 1024-byte alignment slack
static_assert(HB * BN * sizeof(float) == H_ATOM, "the dP hand-over fills the P tile exactly");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The key of this thread's row of tile `tile` (its slot's sel entry; 0 past the count, never read).
__device__ __forceinline__ int32_t tile_key(const int32_t* __restrict__ sel, int tile, int cnt) {
  const int slot = tile * BN + (threadIdx.x >> 3);
  return slot < cnt ? sel[slot] : 0;
}

// Key tile `tile` of the row: thread p copies 16-byte chunk p % 8 of every atom column of key row
// p / 8, whose key is `key` (tile_key; zeros past the count and past C + R), and records the key
// (−1 past the count) in idx.
__device__ __forceinline__ void load_key_tile(unsigned char* buf, int32_t* idx, int32_t key, int tile, int cnt,
                                              const AttnBwdArgs& a) {
  const int p = threadIdx.x, r = p >> 3, ch = p & 7, D = a.C + a.R;
  const bool valid = tile * BN + r < cnt;
  const int64_t t = key;
  if (ch == 0) idx[r] = valid ? key : -1;
#pragma unroll
  for (int atom = 0; atom < ATOMS; ++atom) {
    const int col = atom * 64 + ch * 8;
    const bool ok = valid && col < D;
    const bf16* src = !ok ? a.c : col < a.C ? a.c + t * a.C + col : a.k_pe + t * a.R + (col - a.C);
    pipeline::cp_async16_or_zero(buf + atom * K_ATOM + wgmma::swizzled(r, ch), src, ok);
  }
}

// Byte offset of (row, col) in a 64-row swizzled tile of one atom column (col < 64).
__device__ __forceinline__ uint32_t at(int row, int col) { return wgmma::swizzled(row, col >> 3) + (col & 7) * 2; }

// The kernel's shared memory, as the warpgroups see it.
struct Shared {
  unsigned char *Q, *dO, *K[2], *dS, *P;
  float *dP, *lse, *delta, *target;
  int32_t* idx;  // [2][BN]: the keys of each buffer's tile
};

// acc = A·K~ᵀ over the first NA atom columns (m64n32k16), A a 64-row head tile (Q~ for S, dO_lat
// for dP) and K~ the key tile, both K-major; complete on return.
template <int NA>
__device__ __forceinline__ void head_key_product(float (&acc)[16], const unsigned char* sA, const unsigned char* sK) {
  const uint64_t dA = wgmma::desc(sA, 16, 1024), dK = wgmma::desc(sK, 16, 1024);
  wgmma::fence();
#pragma unroll
  for (int atom = 0; atom < NA; ++atom)
#pragma unroll
    for (int k = 0; k < 4; ++k)
      wgmma::mma_m64n32k16(acc, wgmma::advance(dA, atom * H_ATOM + k * 32), wgmma::advance(dK, atom * K_ATOM + k * 32),
                           atom > 0 || k > 0);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_registers(acc);
}

// Phase 1 of warpgroup 0: S of the tile, then P and dS (with warpgroup 1's dP) into their tiles,
// and the tile's T^ partials.
__device__ __forceinline__ void scores_and_dlogits(const AttnBwdArgs& a, const Shared& sm, const unsigned char* sK,
                                                   int tile, int cnt) {
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int t = threadIdx.x & 127;
  float s[16];
  head_key_product<ATOMS>(s, sm.Q, sK);

  pipeline::bar_sync(BAR_DP, NTHREADS);
  float dp[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) dp[i] = sm.dP[i * 128 + t];
  pipeline::bar_sync(BAR_DP_READ, 128);  // every thread of this warpgroup has read its dP

  const float sl2 = a.scale * kLog2e;
  float tsum[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 4 * j + e;
      const int r = warp * 16 + g + 8 * (e >> 1);
      const bool ok = tile * BN + 8 * j + 2 * q + (e & 1) < cnt;
      const float p = ok ? exp2f(s[i] * sl2 - sm.lse[r]) : 0.f;
      // A softmax over one key has zero gradient: dP and Δ are then the same number summed in two
      // orders (tensor core vs SIMT), so form 0 exactly, never their noise.
#if DSA_MUTANT_dlogit_missing_delta
      dp[i] = ok ? p * dp[i] : 0.f;
#else
      dp[i] = ok && cnt > 1 ? p * (dp[i] - sm.delta[r]) : 0.f;
#endif
      s[i] = p;
    }
    tsum[2 * j] = s[4 * j] + s[4 * j + 2], tsum[2 * j + 1] = s[4 * j + 1] + s[4 * j + 3];
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const int r = warp * 16 + g + 8 * (e >> 1), col = 8 * j + 2 * q;
      *reinterpret_cast<uint32_t*>(sm.P + at(r, col)) = mma::pack_bf16(s[4 * j + e], s[4 * j + e + 1]);
      *reinterpret_cast<uint32_t*>(sm.dS + at(r, col)) = mma::pack_bf16(dp[4 * j + e], dp[4 * j + e + 1]);
    }
  }
  if (a.target) {  // T^: this warp's 16 heads of each slot (fp32 P, before its bf16 rounding)
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) tsum[i] += __shfl_xor_sync(0xffffffffu, tsum[i], o);
    if (g == 0)
#pragma unroll
      for (int i = 0; i < 8; ++i) sm.target[warp * BN + 8 * (i >> 1) + 2 * q + (i & 1)] = tsum[i];
  }
}

// dK~ of the tile's keys, slice d of 64 columns: dK~ᵀ_d = Q~ᵀ_d·dS (ak) and dO_latᵀ_d·P (av, d < 8),
// issued as one wgmma group.
__device__ __forceinline__ void key_slice_issue(float (&ak)[16], float (&av)[16], const Shared& sm, int d) {
  const uint64_t dS = wgmma::desc(sm.dS, H_ATOM, 1024), dP = wgmma::desc(sm.P, H_ATOM, 1024);
  const uint64_t dQt = wgmma::desc(sm.Q + d * H_ATOM, H_ATOM, 1024);
  const uint64_t dOt = wgmma::desc(sm.dO + (d < LAT_ATOMS ? d : 0) * H_ATOM, H_ATOM, 1024);
  wgmma::fence();
#pragma unroll
  for (int k = 0; k < HB / 16; ++k)
    wgmma::mma_m64n32k16<1, 1>(ak, wgmma::advance(dQt, k * 16 * 128), wgmma::advance(dS, k * 16 * 128), k > 0);
  if (d < LAT_ATOMS)
#pragma unroll
    for (int k = 0; k < HB / 16; ++k)
      wgmma::mma_m64n32k16<1, 1>(av, wgmma::advance(dOt, k * 16 * 128), wgmma::advance(dP, k * 16 * 128), k > 0);
  wgmma::commit();
}

// s·ak + av of slice d (the accumulator: column 16w + g + 8·(e/2) of the slice, key 8j + 2q + e%2)
// added to global dK~ with float2 atomics, adjacent columns paired across lanes g and g ^ 1.
// (float4 atomics, four columns gathered in a lane by a 4 × 4 lane transpose, were 7–9 % slower on
// the H100: 22.8 against 21.3 ms at DeepSeek-V3.2, S = 4096.)
__device__ __forceinline__ void key_slice_add(float (&ak)[16], float (&av)[16], const AttnBwdArgs& a,
                                              const int32_t* keys, int d) {
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int D = a.C + a.R;
  const bool odd = g & 1, latent = d < LAT_ATOMS;
  wgmma::fence_registers(ak);
  wgmma::fence_registers(av);
#pragma unroll
  for (int i = 0; i < 16; ++i) ak[i] = a.scale * ak[i] + (latent ? av[i] : 0.f);
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      // Even g: columns (c, c+1) of key 8j+2q, odd g: of key 8j+2q+1, c the even one of the pair.
      const float mine = odd ? ak[4 * j + e] : ak[4 * j + e + 1];
      const float theirs = __shfl_xor_sync(0xffffffffu, mine, 4);
      const int col = d * 64 + warp * 16 + (g & ~1) + 8 * (e >> 1);
      const int key = keys[8 * j + 2 * q + (odd ? 1 : 0)];
      const float lo = odd ? theirs : ak[4 * j + e], hi = odd ? ak[4 * j + e + 1] : theirs;
      if (key >= 0 && col < D) atomicAdd(reinterpret_cast<float2*>(a.dK + (int64_t)key * D + col), make_float2(lo, hi));
    }
}

// dQ~ += dS·K~ over this warpgroup's atoms of the tile: N = 256 from atom 0 (warpgroup 0) or 5
// (warpgroup 1), and for warpgroup 0 N = 64 of atom 4.
template <int WG>
__device__ __forceinline__ void query_grads(float (&dq)[128], float (&dq4)[32], const Shared& sm,
                                            const unsigned char* sK) {
  const uint64_t dA = wgmma::desc(sm.dS, 16, 1024);
  const uint64_t dB = wgmma::desc(sK + (WG == 0 ? 0 : DQ_SPLIT) * K_ATOM, K_ATOM, 1024);
  wgmma::fence();
#pragma unroll
  for (int k = 0; k < BN / 16; ++k)
    wgmma::mma_m64n256k16<0, 1>(dq, wgmma::advance(dA, k * 32), wgmma::advance(dB, k * 16 * 128), 1);
  if constexpr (WG == 0) {
    const uint64_t dB4 = wgmma::desc(sK + 4 * K_ATOM, K_ATOM, 1024);
#pragma unroll
    for (int k = 0; k < BN / 16; ++k)
      wgmma::mma_m64n64k16<0, 1>(dq4, wgmma::advance(dA, k * 32), wgmma::advance(dB4, k * 16 * 128), 1);
  }
  wgmma::commit();
}

// The tile's dK~ over slices [d0, d1), slice by slice (products, then their atomics), and its dQ~
// (query_grads), whose product is issued after the last slice's so that it runs under that
// slice's atomics (−1.4 % time on the H100 against issuing it first).
template <int WG>
__device__ __forceinline__ void tile_grads(float (&dq)[128], float (&dq4)[32], const AttnBwdArgs& a, const Shared& sm,
                                           const unsigned char* sK, const int32_t* keys) {
  constexpr int d0 = WG == 0 ? 0 : DK_SPLIT, d1 = WG == 0 ? DK_SPLIT : ATOMS;
  float ak[16], av[16];
  for (int d = d0; d < d1 - 1; ++d) {
    key_slice_issue(ak, av, sm, d);
    wgmma::wait<0>();
    key_slice_add(ak, av, a, keys, d);
  }
  key_slice_issue(ak, av, sm, d1 - 1);
  query_grads<WG>(dq, dq4, sm, sK);
  wgmma::wait<1>();  // the slice's group; dQ~'s stays in flight
  key_slice_add(ak, av, a, keys, d1 - 1);
}

// Columns col0.. of dQ~ (N of them, the accumulator layout) times qscale, as bf16; heads past H and
// columns past C + R are not stored.
template <int N>
__device__ __forceinline__ void store_dq(const AttnBwdArgs& a, const float (&acc)[N], int row, int h0, int col0,
                                         float qscale) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, g = lane >> 2, q = lane & 3;
  const int D = a.C + a.R;
#pragma unroll
  for (int n8 = 0; n8 < N / 4; ++n8) {
    const int col = col0 + n8 * 8 + 2 * q;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = h0 + warp * 16 + g + 8 * r;
      if (h >= a.H || col >= D) continue;
      bf16* dst = a.dQt + ((int64_t)row * a.H + h) * D;
      *reinterpret_cast<__nv_bfloat162*>(dst + col) =
          __floats2bfloat162_rn(qscale * acc[4 * n8 + 2 * r], qscale * acc[4 * n8 + 2 * r + 1]);
    }
  }
}

// A warpgroup's whole work for its row and head block (the file's comment).
template <int WG>
__device__ __forceinline__ void backward_rows(const AttnBwdArgs& a, const Shared& sm, int row, int h0, int cnt) {
  const int t = threadIdx.x & 127;
  const int32_t* sel = a.sel + (int64_t)row * a.K;
  const int ntiles = (cnt + BN - 1) / BN;
  float dq[128], dq4[32];
#pragma unroll
  for (int i = 0; i < 128; ++i) dq[i] = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) dq4[i] = 0.f;

  // This thread's key of the next tile is read a tile ahead, so the gather does not wait on a
  // global load at the top of every tile (−3.8 % time on the H100).
  int32_t next_key = tile_key(sel, 1, cnt);
  for (int j = 0; j < ntiles; ++j) {
    const unsigned char* sK = (j & 1) ? sm.K[1] : sm.K[0];
    mma::cp_async_wait_all();
    wgmma::fence_proxy_async();  // the gathered tile, seen by the async proxy
    __syncthreads();             // landed for every thread; the last tile's readers are done
    if (j + 1 < ntiles) {
      load_key_tile((j & 1) ? sm.K[0] : sm.K[1], sm.idx + ((j + 1) & 1) * BN, next_key, j + 1, cnt, a);
      next_key = tile_key(sel, j + 2, cnt);
    }
    mma::cp_async_commit();

    if constexpr (WG == 0) {
      scores_and_dlogits(a, sm, sK, j, cnt);
    } else {
      float dp[16];
      head_key_product<LAT_ATOMS>(dp, sm.dO, sK);
#pragma unroll
      for (int i = 0; i < 16; ++i) sm.dP[i * 128 + t] = dp[i];
      pipeline::bar_arrive(BAR_DP, NTHREADS);
    }
    wgmma::fence_proxy_async();  // P and dS (st.shared), seen by the async proxy
    __syncthreads();
    if (WG == 0 && a.target && threadIdx.x < BN && j * BN + threadIdx.x < cnt) {  // the CTA's 64 heads, fixed order
      const int c = threadIdx.x;
      const float tv = ((sm.target[c] + sm.target[BN + c]) + sm.target[2 * BN + c]) + sm.target[3 * BN + c];
      atomicAdd(a.target + (int64_t)row * a.K + j * BN + c, tv);
    }

    tile_grads<WG>(dq, dq4, a, sm, sK, sm.idx + (j & 1) * BN);
    wgmma::wait<0>();
  }
  mma::cp_async_wait_all();  // a row without keys still has Q~ and dO_lat in flight
  wgmma::fence_registers(dq);
  wgmma::fence_registers(dq4);

#if DSA_MUTANT_dq_missing_scale
  const float qscale = 1.f;  // dQ~ without the softmax scale
#else
  const float qscale = a.scale;
#endif
  store_dq(a, dq, row, h0, WG == 0 ? 0 : DQ_SPLIT * 64, qscale);
  if constexpr (WG == 0) store_dq(a, dq4, row, h0, 256, qscale);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

__global__ void __launch_bounds__(NTHREADS, 1) attention_backward_sm90_kernel(AttnBwdArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const Shared sm{smem + OFF_Q,
                  smem + OFF_DO,
                  {smem + OFF_K0, smem + OFF_K1},
                  smem + OFF_DS,
                  smem + OFF_P,
                  reinterpret_cast<float*>(smem + OFF_P),
                  reinterpret_cast<float*>(smem + OFF_LSE),
                  reinterpret_cast<float*>(smem + OFF_DELTA),
                  reinterpret_cast<float*>(smem + OFF_TARGET),
                  reinterpret_cast<int32_t*>(smem + OFF_IDX)};
  const int row = a.Tq - 1 - blockIdx.x, h0 = blockIdx.y * HB;  // latest rows first: they select the most keys
  const int cnt = a.count[row];
  const int hv = min(HB, a.H - h0);
  // Warp-uniform to the compiler (a broadcast), or it serializes every wgmma after the role branch.
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x >> 7), 0);

  wgmma::load_head_block<NTHREADS>(sm.Q, a.Qt, row, h0, a.H, a.C + a.R, ATOMS);
  wgmma::load_head_block<NTHREADS>(sm.dO, a.dO_lat, row, h0, a.H, a.C, LAT_ATOMS);
  if (cnt > 0) load_key_tile(sm.K[0], sm.idx, tile_key(a.sel + (int64_t)row * a.K, 0, cnt), 0, cnt, a);
  mma::cp_async_commit();
  for (int h = threadIdx.x; h < HB; h += NTHREADS) {
    const bool on = h < hv;
#if DSA_MUTANT_base2_lse_backward
    sm.lse[h] = on ? a.lse[(int64_t)row * a.H + h0 + h] : INFINITY;  // a natural-log lse used as base 2
#else
    sm.lse[h] = on ? a.lse[(int64_t)row * a.H + h0 + h] * kLog2e : INFINITY;  // log2 domain; absent heads P = 0
#endif
    sm.delta[h] = on ? a.delta[(int64_t)row * a.H + h0 + h] : 0.f;
  }
  // The zero fills of Q~ and dO_lat (st.shared) reach the async proxy through the first tile's
  // fence and barrier; a row without keys stores its zero dQ~ only.
  if (wg == 0)
    backward_rows<0>(a, sm, row, h0, cnt);
  else
    backward_rows<1>(a, sm, row, h0, cnt);
#else
  __trap();  // never launched: the host dispatches here only when sm_90a code was compiled
#endif
}

}  // namespace

bool attention_backward_sm90_fits(const AttnBwdArgs& a) {
  static_assert(ATOMS * 64 == 576, "sm90a_latent_width's C + R bound is this kernel's atom count");
  return sm90a_latent_width(a.C, a.R) && sm90a_kernel_fits(reinterpret_cast<const void*>(attention_backward_sm90_kernel), SMEM_BYTES);
}

void attention_backward_sm90(const AttnBwdArgs& a, cudaStream_t s) {
  DSA_CUDA_CHECK(cudaFuncSetAttribute(attention_backward_sm90_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      SMEM_BYTES));
  const dim3 grid(a.Tq, (a.H + HB - 1) / HB);
  attention_backward_sm90_kernel<<<grid, NTHREADS, SMEM_BYTES, s>>>(a);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::fused
