// Indexer scores fused with the streaming top-k (SPEC.md §3–§4) on Hopper warpgroup tensor cores
// (wgmma, sm_90a), for HI ≤ 64 and DI ≤ 128. Same contract, candidate buffer and selects as the
// mma.sync kernel of indexer_topk.cu, which serves every other shape and device.
//
// One CTA (two warpgroups, 256 threads) owns BQ = 4 consecutive local query rows and streams over
// the union of their visible key ranges in steps of 128 keys, 64 a warpgroup. A warpgroup's product
// is one m64nNk16 chain: keys as M (its 64-key tile), the 4 rows' heads as N (N = 4·HIp, HIp = HI
// rounded up to 16, 32 or 64), DI as K, both operands K-major in 128-byte-swizzled shared memory.
// q_I of the 4 rows is loaded once per CTA; key tiles are double-buffered with cp.async, the next
// step's loads issued before this step's product. The head reduction Σ_h w·φ(u) is in-thread (a
// thread holds 2 keys × N/4 columns, its w read from a per-lane permuted copy), then a two-step
// shuffle that leaves lane q of a quad with row q's score of its 2 keys: the candidate insertion
// and the compaction (fused/topk_select.cuh, over all 256 threads) are the mma.sync kernel's.
// Deterministic: fixed tile order and reduction order; the buffer's slot order varies, the
// selects and the canonical sort do not depend on it.
// Measured (27th session, H100): 5–9 % faster than the mma.sync kernel at S 16K, 7–11 % slower at
// 4K. The selects, not the product, bound it: at one CTA an SM the compactions and each row's last
// select and sort run with the tensor cores idle, and its CAP (3008 at K' 2048) compacts more often
// than the mma.sync kernel's 4096. Hence the second kernel here, indexer_scores_sm90_kernel: the same
// product and head reduction with the selection taken out, the first phase of the two-phase indexer
// (indexer_topk.cu's indexer_topk_two_phase, fused/topk_rows.cu the second).
#include <algorithm>
#include <cstdint>

#include "fused/cuda_check.hpp"
#include "fused/device.hpp"
#include "fused/indexer_rows.cuh"
#include "fused/indexer_topk_sm90.hpp"
#include "fused/mma.cuh"
#include "fused/pipeline.cuh"
#include "fused/topk_rows.hpp"
#include "fused/topk_select.cuh"
#include "fused/wgmma.cuh"

namespace dsa::fused {
namespace {

constexpr int kThreads = 256;  // two warpgroups; topk_select's selects take kSelThreads of them
static_assert(kThreads == kSelThreads, "every thread of the CTA takes part in a select");
constexpr int BQ = 4;          // query rows per CTA (a quad's 4 lanes, one row each)
constexpr int kTileKeys = 64;  // keys per warpgroup per step (the wgmma M)
constexpr int kStepKeys = 2 * kTileKeys;
constexpr int kAtomBytes = 64 * 128;  // 64 rows × 64 bf16 columns, the swizzle atom column of a tile
constexpr int kStatic = 4096;         // static shared memory and the per-block reserve, rounded up
constexpr int kScoreSpan = 32 * kStepKeys;  // keys a CTA of the scores-only kernel takes (of its rows' union)

[[maybe_unused]] __host__ __device__ constexpr int heads_padded(int N) { return N / BQ; }

// Dynamic shared memory of the kernel for N columns and `atoms` 64-column atom columns of DI.
struct Sm90Layout {
  int N, atoms, CAP;
  __host__ __device__ int q_bytes() const { return atoms * N * 128; }
  __host__ __device__ int k_bytes() const { return 2 * 2 * atoms * kAtomBytes; }  // 2 stages × 2 warpgroups
  __host__ __device__ int w_stride() const { return N / 4 + 4; }                  // floats per lane; +4: no bank conflict
  __host__ __device__ int w_bytes() const { return 4 * w_stride() * 4; }
  __host__ __device__ int buf_bytes() const { return BQ * CAP * 8; }
  __host__ __device__ int bytes() const { return 1024 + q_bytes() + k_bytes() + w_bytes() + buf_bytes(); }  // 1024: alignment
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// 16 bytes (8 bf16 from column col of a row of length n) into shared memory at dst: cp.async when
// the rows are 16-byte aligned (vec), else element loads; zeros past n or when !ok.
__device__ __forceinline__ void load_chunk(unsigned char* dst, const bf16* row, int col, int n, bool ok, bool vec) {
  if (vec) {
    pipeline::cp_async16_or_zero(dst, ok && col < n ? row + col : row, ok && col < n);
    return;
  }
  uint32_t v[4] = {0, 0, 0, 0};
  if (ok)
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = mma::load_pair(row, col + 2 * e, n, false);
  *reinterpret_cast<uint4*>(dst) = make_uint4(v[0], v[1], v[2], v[3]);
}

// The 64-key tile of keys [t0, t0 + 64) ∩ [lo, hi) into `tile` (swizzled, K-major, zeros
// elsewhere), by the 128 threads of one warpgroup (wtid its thread).
template <int ATOMS>
__device__ __forceinline__ void load_key_tile(unsigned char* tile, const IndexerArgs& a, int t0, int lo, int hi, int wtid,
                                              bool vec) {
  constexpr int kChunks = ATOMS * 8;  // 16-byte chunks of a row
#pragma unroll
  for (int k = 0; k < kTileKeys * kChunks / 128; ++k) {
    const int id = wtid + 128 * k, r = id / kChunks, ch = id % kChunks, t = t0 + r;
    const bool ok = t >= lo && t < hi;
    load_chunk(tile + (ch >> 3) * kAtomBytes + wgmma::swizzled(r, ch & 7), a.k_I + size_t(ok ? t : 0) * a.DI, ch * 8, a.DI,
               ok, vec);
  }
}

// S = key tile · q_Iᵀ for this warpgroup: m64nNk16 over the atoms of DI.
template <int N, int ATOMS>
__device__ __forceinline__ void tile_product(float (&acc)[N / 2], const unsigned char* tile, const unsigned char* sQ) {
  const uint64_t dK = wgmma::desc(tile, 16, 1024), dQ = wgmma::desc(sQ, 16, 1024);
  wgmma::fence();
#pragma unroll
  for (int atom = 0; atom < ATOMS; ++atom)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint64_t a = wgmma::advance(dK, atom * kAtomBytes + k * 32), b = wgmma::advance(dQ, atom * N * 128 + k * 32);
      const int accumulate = atom > 0 || k > 0;
      if constexpr (N == 256)
        wgmma::mma_m64n256k16<0, 0>(acc, a, b, accumulate);
      else if constexpr (N == 128)
        wgmma::mma_m64n128k16<0, 0>(acc, a, b, accumulate);
      else
        wgmma::mma_m64n64k16<0, 0>(acc, a, b, accumulate);
    }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_registers(acc);
}

// The scores of this lane's two keys (rows g, g + 8 of its warp's 16) for query row q of the quad:
// Σ_h w·φ(u) in-thread over the lane's columns, then across the quad so that lane q keeps row q.
template <int N>
__device__ __forceinline__ void head_reduce(float (&score)[2], const float (&acc)[N / 2], const float* sWq, bool relu) {
  constexpr int JQ = heads_padded(N) / 8;  // n8 column groups per query row
  float part[2][BQ];
#pragma unroll
  for (int b = 0; b < BQ; ++b) {
    part[0][b] = part[1][b] = 0.f;
#pragma unroll
    for (int jj = 0; jj < JQ; jj += 2) {
      const int j = b * JQ + jj;
      const float4 w = *reinterpret_cast<const float4*>(sWq + 2 * j);  // columns of n8 groups j, j + 1
      const float wv[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          part[r][b] += wv[2 * u] * phi(acc[4 * (j + u) + 2 * r], relu) + wv[2 * u + 1] * phi(acc[4 * (j + u) + 2 * r + 1], relu);
    }
  }
  // Across the quad: lanes q and q ^ 2 swap halves (rows 0–1 vs 2–3), then q and q ^ 1.
  const int q = threadIdx.x & 3;
  const bool hi2 = q & 2, hi1 = q & 1;
  float v[2][2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const float send = hi2 ? part[r][k] : part[r][k + 2], keep = hi2 ? part[r][k + 2] : part[r][k];
      v[r][k] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float send = hi1 ? v[r][0] : v[r][1], keep = hi1 ? v[r][1] : v[r][0];
    score[r] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
  }
}

// The visible ranges of the CTA's rows i0 … i0 + 3 (those below row_end) into s_b / s_e (thread
// 0 writes) and their union into [lo, hi).
__device__ __forceinline__ void row_ranges(const IndexerArgs& a, int i0, int row_end, int* s_b, int* s_e, int& lo, int& hi) {
  lo = a.Tp, hi = 0;
  for (int b = 0; b < BQ; ++b) {
    const int i = i0 + b;
    KeyRange r{0, 0};
    if (i < row_end) r = visible_range(a.rows, i, a.Tp);
    if (r.end > r.begin) lo = min(lo, r.begin), hi = max(hi, r.end);
    if (threadIdx.x == 0) s_b[b] = r.begin, s_e[b] = r.end;
  }
}

// q_I of the 4 rows (N rows: row b·HIp + h, zeros past HI and past row_end) and the permuted w:
// lane q of a quad reads the weights of its columns 8j + 2q + e at sW[q·w_stride + 2j + e]. All
// threads; q_I's cp.async copies are left to the caller's commit.
template <int N, int ATOMS>
__device__ __forceinline__ void load_queries(const IndexerArgs& a, const Sm90Layout& L, int i0, int row_end, bool vec,
                                             unsigned char* sQ, float* sW) {
  constexpr int HIp = heads_padded(N);
  const int tid = threadIdx.x, HI = a.HI, DI = a.DI;
  for (int id = tid; id < N * ATOMS * 8; id += kThreads) {
    const int r = id / (ATOMS * 8), ch = id % (ATOMS * 8), b = r / HIp, h = r % HIp, i = i0 + b;
    const bool ok = i < row_end && h < HI;
    load_chunk(sQ + (ch >> 3) * N * 128 + wgmma::swizzled(r, ch & 7), a.q_I + (size_t(ok ? i : 0) * HI + (ok ? h : 0)) * DI,
               ch * 8, DI, ok, vec);
  }
  for (int id = tid; id < 4 * (N / 4); id += kThreads) {
    const int lq = id / (N / 4), j = (id % (N / 4)) / 2, e = id % 2, col = 8 * j + 2 * lq + e;
    const int b = col / HIp, h = col % HIp, i = i0 + b;
    sW[lq * L.w_stride() + 2 * j + e] = (i < row_end && h < HI) ? __bfloat162float(a.w[size_t(i) * HI + h]) : 0.f;
  }
}


// The dynamic shared memory both kernels share (1024-byte aligned for the swizzle): q_I, the
// double-buffered key tiles of the two warpgroups, the permuted w; the streaming kernel's candidate
// buffers follow at end().
struct Sm90Smem {
  unsigned char* sQ;
  unsigned char* sK;
  float* sW;
  __device__ Sm90Smem(unsigned char* raw, const Sm90Layout& L)
      : sQ(reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023})),
        sK(sQ + L.q_bytes()),
        sW(reinterpret_cast<float*>(sK + L.k_bytes())) {}
  __device__ unsigned char* end(const Sm90Layout& L) const { return reinterpret_cast<unsigned char*>(sW + 4 * L.w_stride()); }
};

// This warpgroup's key tile of the first step (when [lo, hi) is not empty), then every copy into
// shared memory (q_I's too) in and visible to wgmma. All threads.
template <int ATOMS>
__device__ __forceinline__ void first_tile(const Sm90Smem& m, const IndexerArgs& a, int lo, int hi, int wg, int wtid, bool vec) {
  if (lo < hi) load_key_tile<ATOMS>(m.sK + wg * ATOMS * kAtomBytes, a, lo + wg * kTileKeys, lo, hi, wtid, vec);
  mma::cp_async_commit();
  mma::cp_async_wait_all();
  wgmma::fence_proxy_async();  // cp.async and st.shared writes, read next by wgmma (the async proxy)
  __syncthreads();
}

// One step of both kernels for this warpgroup: the next step's key tile into the other stage, then
// this step's product and head reduction. score[r] is row q's score of key
// base + wg·64 + key_in_tile + 8r (the caller checks visibility); the caller waits for the copy.
template <int N, int ATOMS>
__device__ __forceinline__ void step_scores(float (&score)[2], float (&acc)[N / 2], const Sm90Smem& m, const IndexerArgs& a,
                                            const float* sWq, int base, int stage, int lo, int hi, int wg, int wtid, bool vec) {
  if (base + kStepKeys < hi)
    load_key_tile<ATOMS>(m.sK + ((stage ^ 1) * 2 + wg) * ATOMS * kAtomBytes, a, base + kStepKeys + wg * kTileKeys, lo, hi,
                         wtid, vec);
  mma::cp_async_commit();
  tile_product<N, ATOMS>(acc, m.sK + (stage * 2 + wg) * ATOMS * kAtomBytes, m.sQ);
  head_reduce<N>(score, acc, sWq, a.relu);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <int N, int ATOMS>
__global__ void __launch_bounds__(kThreads, 1) indexer_topk_sm90_kernel(const IndexerArgs a, const Sm90Layout L, bool vec) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const Sm90Smem m(smem_raw, L);
  uint32_t* skey = reinterpret_cast<uint32_t*>(m.end(L));
  int32_t* sidx = reinterpret_cast<int32_t*>(skey + BQ * L.CAP);
  __shared__ int s_count[BQ], s_b[BQ], s_e[BQ];
  __shared__ uint32_t s_thr[BQ];
  __shared__ SelectScratch scr;

  const int tid = threadIdx.x, lane = tid & 31, q = lane & 3;
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0), wtid = tid & 127;
  const int key_in_tile = ((tid >> 5) & 3) * 16 + (lane >> 2);  // this lane's keys: +0 and +8
  const int i0 = (gridDim.x - 1 - blockIdx.x) * BQ;             // the latest (longest) rows start first

  int lo, hi;
  row_ranges(a, i0, a.Tq, s_b, s_e, lo, hi);
  load_queries<N, ATOMS>(a, L, i0, a.Tq, vec, m.sQ, m.sW);
  if (tid < BQ) s_count[tid] = 0, s_thr[tid] = 0u;
  first_tile<ATOMS>(m, a, lo, hi, wg, wtid, vec);

  const float* sWq = m.sW + q * L.w_stride();
  const int row_i = i0 + q;
  float acc[N / 2];
  for (int base = lo, stage = 0; base < hi; base += kStepKeys, stage ^= 1) {
    // Room for one step of insertions in every row's buffer (at most 128 a row).
    for (int b = 0; b < BQ; ++b) {
      const int n = s_count[b];
      if (n + kStepKeys > L.CAP) {
        const uint32_t pivot = select_top(skey + b * L.CAP, sidx + b * L.CAP, n, a.K, scr);
        if (tid == 0) s_count[b] = a.K, s_thr[b] = pivot;
        __syncthreads();
      }
    }
    float score[2];
    step_scores<N, ATOMS>(score, acc, m, a, sWq, base, stage, lo, hi, wg, wtid, vec);
    if (row_i < a.Tq) {
      const int rb = s_b[q], re = s_e[q];
      const uint32_t thr = s_thr[q];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int t = base + wg * kTileKeys + key_in_tile + 8 * r;
        if (t < rb || t >= re) continue;  // visibility by selection (invisible key rows may be NaN)
        if (a.scores) a.scores[size_t(row_i) * a.Tp + t] = score[r];
        const uint32_t key = order_key(score[r]);
        if (key > thr) {
          const int pos = atomicAdd(&s_count[q], 1);
          skey[q * L.CAP + pos] = key;
          sidx[q * L.CAP + pos] = t;
        }
      }
    }
    mma::cp_async_wait_all();
    wgmma::fence_proxy_async();
    __syncthreads();  // the next tile is in for every thread, this one's readers are done, counts settled
  }

  for (int b = 0; b < BQ; ++b) {
    if (i0 + b >= a.Tq) break;
    write_topk_row(skey + b * L.CAP, sidx + b * L.CAP, s_count[b], a, i0 + b, scr);
  }
#else
  __trap();  // never launched: the host dispatches here only when sm_90a code was compiled
#endif
}

// Scores only, the first phase of IndexerKernel::two_phase: local rows [row0, row_end) in blocks of
// 4 (blockIdx.x, the latest first), each block's key union cut into spans of `span` keys
// (blockIdx.y; a CTA past the union returns at once), every visible score of its span into
// out[(i − row0)·ld + t] and nothing else. The product and the head reduction are the streaming
// kernel's above, so both give the same scores bit for bit; each warpgroup streams its own
// 64-key half of every step.
template <int N, int ATOMS>
__global__ void __launch_bounds__(kThreads, 1)
    indexer_scores_sm90_kernel(const IndexerArgs a, const Sm90Layout L, bool vec, float* out, size_t ld, int row0,
                               int row_end, int span) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const Sm90Smem m(smem_raw, L);
  __shared__ int s_b[BQ], s_e[BQ];

  const int tid = threadIdx.x, lane = tid & 31, q = lane & 3;
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0), wtid = tid & 127;
  const int key_in_tile = ((tid >> 5) & 3) * 16 + (lane >> 2);  // this lane's keys: +0 and +8
  const int i0 = row0 + (gridDim.x - 1 - blockIdx.x) * BQ;
  int lo, hi;
  row_ranges(a, i0, row_end, s_b, s_e, lo, hi);
  lo += blockIdx.y * span;
  hi = min(hi, lo + span);
  if (lo >= hi) return;  // CTA-uniform: nothing of this span is visible to the rows
  load_queries<N, ATOMS>(a, L, i0, row_end, vec, m.sQ, m.sW);
  first_tile<ATOMS>(m, a, lo, hi, wg, wtid, vec);

  const float* sWq = m.sW + q * L.w_stride();
  const int row_i = i0 + q;
  float* out_row = out + size_t(row_i - row0) * ld;
  float acc[N / 2];
  for (int base = lo, stage = 0; base < hi; base += kStepKeys, stage ^= 1) {
    float score[2];
    step_scores<N, ATOMS>(score, acc, m, a, sWq, base, stage, lo, hi, wg, wtid, vec);
    if (row_i < row_end) {
      const int rb = max(s_b[q], lo), re = min(s_e[q], hi);  // the span's keys only: the next span is another CTA's
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int t = base + wg * kTileKeys + key_in_tile + 8 * r;
        if (t >= rb && t < re) out_row[t] = score[r];
      }
    }
    mma::cp_async_wait_all();
    wgmma::fence_proxy_async();
    // The warpgroup's own tiles only: the two warpgroups drift apart, so one's head reduction and
    // stores overlap the other's product (no candidate buffer to keep them in step).
    pipeline::bar_sync(1 + wg, 128);
  }
#else
  __trap();
#endif
}

// The kernel and layout for a shape (N and atoms from HI and DI; CAP as large as fits up to
// K' + max(K', 128)); kernel == nullptr when HI or DI is out of this kernel's range.
struct Sm90Plan {
  const void* kernel = nullptr;
  void (*launch)(const IndexerArgs&, const Sm90Layout&, bool, int, cudaStream_t) = nullptr;
  Sm90Layout L{};
  const void* scores_kernel = nullptr;
  void (*launch_scores)(const IndexerArgs&, const Sm90Layout&, bool, dim3, const ScoreRows&, cudaStream_t) = nullptr;
  Sm90Layout scores_layout() const { return Sm90Layout{L.N, L.atoms, 0}; }  // no candidate buffers
};

template <int N, int ATOMS>
void launch_kernel(const IndexerArgs& a, const Sm90Layout& L, bool vec, int blocks, cudaStream_t s) {
  auto k = indexer_topk_sm90_kernel<N, ATOMS>;
  DSA_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, L.bytes()));
  k<<<blocks, kThreads, L.bytes(), s>>>(a, L, vec);
  DSA_CUDA_CHECK(cudaGetLastError());
}

template <int N, int ATOMS>
void launch_scores_kernel(const IndexerArgs& a, const Sm90Layout& L, bool vec, dim3 grid, const ScoreRows& out,
                          cudaStream_t s) {
  auto k = indexer_scores_sm90_kernel<N, ATOMS>;
  DSA_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, L.bytes()));
  // ScoreRows::scores is const for the reader; the writer owns the same buffer.
  k<<<grid, kThreads, L.bytes(), s>>>(a, L, vec, const_cast<float*>(out.scores), out.ld, out.row0,
                                      std::min(out.row0 + out.rows, a.Tq), kScoreSpan);
  DSA_CUDA_CHECK(cudaGetLastError());
}

template <int N, int ATOMS>
Sm90Plan plan_of(const IndexerArgs& a, int optin) {
  Sm90Plan p;
  p.kernel = reinterpret_cast<const void*>(indexer_topk_sm90_kernel<N, ATOMS>);
  p.launch = launch_kernel<N, ATOMS>;
  p.scores_kernel = reinterpret_cast<const void*>(indexer_scores_sm90_kernel<N, ATOMS>);
  p.launch_scores = launch_scores_kernel<N, ATOMS>;
  p.L = Sm90Layout{N, ATOMS, 0};
  const int room = optin - kStatic - p.L.bytes();  // bytes left for the candidate buffers
  const int fit = room > 0 ? room / (BQ * 8) / 32 * 32 : 0;
  p.L.CAP = std::min(fit, (a.K + std::max(a.K, kStepKeys) + 31) / 32 * 32);
  return p;
}

Sm90Plan plan(const IndexerArgs& a) {
  int dev = 0, optin = 0;
  if (a.HI < 1 || a.HI > 64 || a.DI < 1 || a.DI > 128) return {};
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    cudaGetLastError();  // no device: nothing here fits, and the next launch check must not see this
    return {};
  }
  const bool one_atom = a.DI <= 64;
  if (a.HI <= 16) return one_atom ? plan_of<64, 1>(a, optin) : plan_of<64, 2>(a, optin);
  if (a.HI <= 32) return one_atom ? plan_of<128, 1>(a, optin) : plan_of<128, 2>(a, optin);
  return one_atom ? plan_of<256, 1>(a, optin) : plan_of<256, 2>(a, optin);
}

bool aligned16(const IndexerArgs& a) {
  return a.DI % 8 == 0 && reinterpret_cast<uintptr_t>(a.q_I) % 16 == 0 && reinterpret_cast<uintptr_t>(a.k_I) % 16 == 0;
}

}  // namespace

bool indexer_topk_sm90_fits(const IndexerArgs& a) {
  const Sm90Plan p = plan(a);
  return p.kernel && p.L.CAP >= a.K + kStepKeys && sm90a_kernel_fits(p.kernel, p.L.bytes());
}

void indexer_topk_sm90(const IndexerArgs& a, cudaStream_t s) {
  const Sm90Plan p = plan(a);
  p.launch(a, p.L, aligned16(a), (a.Tq + BQ - 1) / BQ, s);
}

bool indexer_scores_sm90_fits(const IndexerArgs& a) {
  const Sm90Plan p = plan(a);
  return p.scores_kernel && sm90a_kernel_fits(p.scores_kernel, p.scores_layout().bytes());
}

void indexer_scores_sm90(const IndexerArgs& a, const ScoreRows& out, cudaStream_t s) {
  if (out.rows <= 0) return;
  const Sm90Plan p = plan(a);
  const dim3 grid((out.rows + BQ - 1) / BQ, (a.Tp + kScoreSpan - 1) / kScoreSpan);
  p.launch_scores(a, p.scores_layout(), aligned16(a), grid, out, s);
}

}  // namespace dsa::fused
