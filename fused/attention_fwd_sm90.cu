// Sparse MLA attention forward (SPEC.md §5) on Hopper warpgroup tensor cores (wgmma, sm_90a), for
// the production latent width C = 512 with C + R ≤ 576. Same contract and the same rounding points
// as the mma.sync kernel of attention_fwd.cu, which serves every other shape and device.
//
// One CTA = one query row × a block of 64 heads, two warpgroups. Key tiles of 64 selected rows
// K~ = [c; k_pe] are gathered with cp.async into 128-byte-swizzled shared memory (two buffers: the
// next tile loads while this one computes) and serve both products:
//   S = Q~·K~ᵀ   warpgroup w takes keys 32w..32w+31 of the tile (m64n32k16, K-dim C+R, K-major B);
//   O += P·V     warpgroup w takes latent columns 256w..256w+255 over all 64 keys (m64n256k16, the
//                same tile read MN-major as V = c), P (bf16) exchanged through shared memory.
// The two warpgroups share the running row max through shared memory, as the mma.sync kernel's
// warps do. Rows are visited latest first: they select the most keys, so the tail is short.
#include <cmath>
#include "fused/attention_fwd_sm90.hpp"
#include "fused/cuda_check.hpp"
#include "fused/mma.cuh"
#include "fused/softmax_rows.cuh"
#include "fused/wgmma.cuh"

namespace dsa::fused {

namespace {

// [[maybe_unused]]: the compute_80 pass compiles the kernel body out, and with it their only uses.
constexpr int HB = 64;                                 // heads per CTA (the wgmma M)
[[maybe_unused]] constexpr int BN = 64;                // keys per tile
constexpr int ATOMS = 9;                               // 64-column atom columns of the query width: C + R ≤ 576
constexpr int ATOM_BYTES = 64 * 128;                   // one atom column of a 64-row tile
constexpr int TILE_BYTES = ATOMS * ATOM_BYTES;
constexpr int NTHREADS = 256;
[[maybe_unused]] constexpr float kLog2e = 1.4426950408889634f;
[[maybe_unused]] constexpr float kLn2 = 0.6931471805599453f;

// Shared memory: Q~ block, two key tiles, P, and the row max / row sum exchange; the base is
// rounded up to 1024 bytes (the swizzle atom), hence the slack.
[[maybe_unused]] constexpr int OFF_Q = 0, OFF_K0 = TILE_BYTES, OFF_K1 = 2 * TILE_BYTES;
constexpr int OFF_P = 3 * TILE_BYTES;
constexpr int OFF_RED = OFF_P + ATOM_BYTES;
constexpr int SMEM_BYTES = OFF_RED + 4 * HB * (int)sizeof(float) + 1024;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Rows [0, 64) of a swizzled 64-row tile, 16-byte chunk ch of the query width: key slot base + r
// of the row's selection (zeros past cnt), [c; k_pe; 0].
__device__ __forceinline__ void load_key_tile(unsigned char* dst, const int32_t* sel_row, int base, int cnt,
                                              const bf16* __restrict__ c, const bf16* __restrict__ k_pe, int C,
                                              int R) {
  for (int i = threadIdx.x; i < BN * ATOMS * 8; i += NTHREADS) {
    const int r = i / (ATOMS * 8), ch = i - r * (ATOMS * 8), col = ch * 8;
    unsigned char* d = dst + (ch >> 3) * ATOM_BYTES + wgmma::swizzled(r, ch & 7);
    const int slot = base + r;
    if (slot >= cnt || col >= C + R) {
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
      continue;
    }
    const int64_t t = sel_row[slot];
    mma::cp_async16(d, col < C ? c + t * C + col : k_pe + t * R + (col - C));
  }
}

// The 64 heads h0.. of query row `row` (zeros past H), same layout.
__device__ __forceinline__ void load_query_tile(unsigned char* dst, const bf16* __restrict__ Qt, int64_t row, int h0,
                                                int H, int D) {
  for (int i = threadIdx.x; i < HB * ATOMS * 8; i += NTHREADS) {
    const int r = i / (ATOMS * 8), ch = i - r * (ATOMS * 8), col = ch * 8;
    unsigned char* d = dst + (ch >> 3) * ATOM_BYTES + wgmma::swizzled(r, ch & 7);
    if (h0 + r >= H || col >= D)
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    else
      mma::cp_async16(d, Qt + (row * H + h0 + r) * D + col);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

__global__ void __launch_bounds__(NTHREADS, 1) attention_forward_sm90_kernel(AttnFwdArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  unsigned char* sQ = smem + OFF_Q;
  unsigned char* sK[2] = {smem + OFF_K0, smem + OFF_K1};
  unsigned char* sP = smem + OFF_P;
  float* sMax = reinterpret_cast<float*>(smem + OFF_RED);  // [2][HB]
  float* sSum = sMax + 2 * HB;                             // [2][HB]

  const int row = a.Tq - 1 - blockIdx.x, h0 = blockIdx.y * HB;
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int D = a.C + a.R;
  const int cnt = a.count[row];
  const int32_t* sel = a.sel + (int64_t)row * a.K;
  const int ntiles = (cnt + BN - 1) / BN;
  const float sl2 = a.scale * kLog2e;
  const int r0 = warp * 16 + g;  // this lane's rows r0 and r0 + 8 of the head block

  load_query_tile(sQ, a.Qt, row, h0, a.H, D);
  if (ntiles > 0) load_key_tile(sK[0], sel, 0, cnt, a.c, a.k_pe, a.C, a.R);
  mma::cp_async_commit();

  // Descriptors: Q~ and P are K-major A operands; the key tile is the K-major B of S (rows = keys)
  // and the MN-major B of P·V (rows = keys, 64 latent columns per atom column).
  const uint64_t dQ = wgmma::desc(sQ, 16, 1024), dP = wgmma::desc(sP, 16, 1024);
  const uint64_t dK0 = wgmma::desc(sK[0] + wg * 32 * 128, 16, 1024), dK1 = wgmma::desc(sK[1] + wg * 32 * 128, 16, 1024);
  const uint64_t dV0 = wgmma::desc(sK[0] + wg * 4 * ATOM_BYTES, ATOM_BYTES, 1024),
                 dV1 = wgmma::desc(sK[1] + wg * 4 * ATOM_BYTES, ATOM_BYTES, 1024);

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_part[2] = {0.f, 0.f}, l_one[2] = {0.f, 0.f};

  for (int j = 0; j < ntiles; ++j) {
    mma::cp_async_wait_all();
    wgmma::fence_proxy_async();  // zero fills, cp.async data and the last P, seen by the async proxy
    __syncthreads();             // tile j complete; both warpgroups are done with tile j−1 and sP
    if (j + 1 < ntiles) load_key_tile((j & 1) ? sK[0] : sK[1], sel, (j + 1) * BN, cnt, a.c, a.k_pe, a.C, a.R);
    mma::cp_async_commit();
    const uint64_t dK = (j & 1) ? dK1 : dK0, dV = (j & 1) ? dV1 : dV0;  // selects, not an indexed array

    // S = Q~·K~ᵀ for this warpgroup's 32 keys, over the whole padded width (the padding is zeros):
    // a fixed trip count keeps the accumulator in place, with no compiler-inserted wgmma fences.
    float s[16];
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < ATOMS * 4; ++ks) {
      const uint32_t off = (ks >> 2) * ATOM_BYTES + (ks & 3) * 32;
      wgmma::mma_m64n32k16(s, wgmma::advance(dQ, off), wgmma::advance(dK, off), ks > 0);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_registers(s);

    // Scale into the log2 domain; slots past the count are masked by selection (−inf).
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int slot = j * BN + wg * 32 + (i >> 2) * 8 + 2 * t4 + (i & 1);
      s[i] = slot < cnt ? s[i] * sl2 : -INFINITY;
      mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
    }
    softmax::reduce_rows(mx, sMax, wg, r0, t4, softmax::Max{});
    float alpha[2], m_use[2];
    softmax::update_max(mx, m_run, l_part, m_use, alpha);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      s[i] = exp2f(s[i] - m_use[(i >> 1) & 1]);
      l_part[(i >> 1) & 1] += s[i];
    }
    if (ntiles == 1) {
      // A row whose keys fit one tile: its lse is known now, so P = exp(logit − lse) is rounded to
      // bf16 already normalized, exactly where SPEC.md §8 (and the lowp reference) rounds it.
      l_one[0] = l_part[0];
      l_one[1] = l_part[1];
      softmax::reduce_rows(l_one, sSum, wg, r0, t4, softmax::Sum{});
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float lt = l_one[(i >> 1) & 1];
        s[i] = lt > 0.f ? s[i] / lt : 0.f;
      }
    }
    // P (bf16) into the swizzled 64×64 tile: row r0 (+8), key column wg·32 + 8·(i/4) + 2·t4.
#pragma unroll
    for (int n8 = 0; n8 < 4; ++n8) {
      const int col = wg * 32 + n8 * 8 + 2 * t4;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int rr = r0 + 8 * r;
        *reinterpret_cast<uint32_t*>(sP + wgmma::swizzled(rr, col >> 3) + (col & 7) * 2) =
            mma::pack_bf16(s[4 * n8 + 2 * r], s[4 * n8 + 2 * r + 1]);
      }
    }
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
    wgmma::fence_registers(o);
    wgmma::fence_proxy_async();
    __syncthreads();  // P of both key halves in sP

    // O += P·V for latent columns 256·wg.. over the tile's 64 keys.
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks)
      wgmma::mma_m64n256k16(o, wgmma::advance(dP, ks * 32), wgmma::advance(dV, ks * 16 * 128), 1);
    wgmma::commit();
    wgmma::wait<0>();  // sP and this key buffer are free again before the next tile overwrites them
    wgmma::fence_registers(o);
  }

  // Row sums: 4 lanes of a group, then the two key halves (one-tile rows were normalized already).
  float l[2] = {l_one[0], l_one[1]};
  if (ntiles != 1) {
    l[0] = l_part[0];
    l[1] = l_part[1];
    softmax::reduce_rows(l, sSum, wg, r0, t4, softmax::Sum{});
  }
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    inv[r] = ntiles == 1 ? 1.f : l[r] > 0.f ? 1.f / l[r] : 0.f;
    const int h = h0 + r0 + 8 * r;
    if (wg == 0 && t4 == 0 && h < a.H)
      a.lse[(int64_t)row * a.H + h] = cnt == 0 || !(l[r] > 0.f) ? -INFINITY : (m_run[r] + log2f(l[r])) * kLn2;
  }
#pragma unroll
  for (int n8 = 0; n8 < 32; ++n8) {
    const int col = wg * 256 + n8 * 8 + 2 * t4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int h = h0 + r0 + 8 * r;
      if (h >= a.H) continue;
      bf16* dst = a.O_lat + ((int64_t)row * a.H + h) * a.C;
      *reinterpret_cast<__nv_bfloat162*>(dst + col) =
          __floats2bfloat162_rn(o[4 * n8 + 2 * r] * inv[r], o[4 * n8 + 2 * r + 1] * inv[r]);
    }
  }
#else
  __trap();  // never launched: the host dispatches here only when sm_90a code was compiled
#endif
}

}  // namespace

bool attention_forward_sm90_fits(const AttnFwdArgs& a) {
  if (a.C != 512 || a.R % 8 != 0 || a.C + a.R > ATOMS * 64) return false;
  int dev = 0, major = 0, minor = 0, max_smem = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (major != 9 || minor != 0 || max_smem < SMEM_BYTES) return false;
  // The sm_90a machine code must be in the binary (a build for other targets has only the trap).
  cudaFuncAttributes fa{};
  DSA_CUDA_CHECK(cudaFuncGetAttributes(&fa, attention_forward_sm90_kernel));
  return fa.binaryVersion == 90;
}

void attention_forward_sm90(const AttnFwdArgs& a, cudaStream_t s) {
  DSA_CUDA_CHECK(cudaFuncSetAttribute(attention_forward_sm90_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      SMEM_BYTES));
  const dim3 grid(a.Tq, (a.H + HB - 1) / HB);
  attention_forward_sm90_kernel<<<grid, NTHREADS, SMEM_BYTES, s>>>(a);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::fused
