// Indexer scores fused with a streaming top-k (SPEC.md §3–§4).
//
// One CTA (8 warps) owns BQ consecutive local query rows and streams over the union of their
// visible key ranges in tiles of 256 keys. Scores run on tensor cores with keys as the MMA's M
// side and heads as N: a warp holds A fragments of its 32 keys × DI in registers (loaded once per
// tile, reused by every row and head) and streams B = q_I[g] (heads × DI, bf16) from shared
// memory with ldmatrix; the head reduction Σ_h w·φ(u) is then in-thread (two heads per n8 tile)
// plus a quad shuffle, so no score tile goes through shared memory.
//
// Top-k state is O(K) per row: a shared-memory candidate buffer of CAP = K' + max(K', 256)
// (key, index) pairs and a threshold. A visible key enters the buffer only if its score beats the
// threshold; before a tile could overflow the buffer, an exact CTA-wide radix select
// (fused/topk_select.cuh) compacts it to the K' best and raises the threshold to their pivot (a
// later key equal to the pivot cannot change the answer, ties may resolve any way). At the end
// a last select leaves K' keys; IndexerArgs::topk_scores, when asked for, gets each kept key's
// score back from its order key (the sparse loss reads them). Rows shorter than CAP − 256 never
// compact. Shared memory:
// BQ·(HI16·(DI16+8)·2 + HI16·4 + CAP·8) bytes: BQ = 2 with two CTAs per SM where that fits
// (99 KB a CTA at HI = 64, DI = 128, K' = 2048), else 4, 2 or 1 at one CTA per SM; no global
// scratch. Deterministic: the tile order and the in-thread reduction order are fixed; candidates
// take buffer slots through an atomic counter (an order that varies run to run), so every select
// breaks boundary ties by the lower key index and the row is written in canonical order.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fused/api.cuh"
#include "fused/cuda_check.hpp"
#include "fused/indexer_rows.cuh"
#include "fused/indexer_topk_sm90.hpp"
#include "fused/mma.cuh"
#include "fused/topk_select.cuh"
#include "core/errors.hpp"

namespace dsa::fused {
namespace {

constexpr int kThreads = kSelThreads;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kKeysPerWarp = 32;       // two m16 tiles
constexpr int kTile = kWarps * kKeysPerWarp;
constexpr int kMaxBQ = 4;

__host__ __device__ inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

struct IndexerLayout {
  int HIp, DIp, LDQ, BQ, CAP;
  __host__ __device__ size_t q_bytes() const { return size_t(BQ) * HIp * LDQ * 2; }
  __host__ __device__ size_t w_bytes() const { return size_t(BQ) * HIp * 4; }
  __host__ __device__ size_t buf_bytes() const { return size_t(BQ) * CAP * 8; }
  __host__ __device__ size_t bytes() const { return q_bytes() + w_bytes() + buf_bytes(); }
};

__global__ void fill_kernel(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}

// Two CTAs per SM when DI ≤ 128 (≤ 128 registers): one computes while the other selects.
template <int KS>  // k16 steps of DI held in registers: DI ≤ 16·KS
__global__ void __launch_bounds__(kThreads, KS <= 8 ? 2 : 1) indexer_topk_kernel(const IndexerArgs a, const IndexerLayout L) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sq = reinterpret_cast<bf16*>(smem);
  float* sw = reinterpret_cast<float*>(smem + L.q_bytes());
  uint32_t* skey = reinterpret_cast<uint32_t*>(smem + L.q_bytes() + L.w_bytes());
  int32_t* sidx = reinterpret_cast<int32_t*>(skey + size_t(L.BQ) * L.CAP);
  __shared__ int s_count[kMaxBQ], s_b[kMaxBQ], s_e[kMaxBQ];
  __shared__ uint32_t s_thr[kMaxBQ];
  __shared__ SelectScratch scr;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, qq = lane & 3;
  const int i0 = (gridDim.x - 1 - blockIdx.x) * L.BQ;  // the latest (longest) rows start first
  const int HI = a.HI, DI = a.DI, nks = L.DIp / 16, npairs = L.HIp / 16;
  const bool di_even = (DI & 1) == 0;

  // Rows, their ranges, q_I (zero-padded to HIp × DIp) and w in shared memory.
  int lo = a.Tp, hi = 0;
  for (int q = 0; q < L.BQ; ++q) {
    const int i = i0 + q;
    KeyRange r{0, 0};
    if (i < a.Tq) r = visible_range(a.rows, i, a.Tp);
    if (r.end > r.begin) lo = min(lo, r.begin), hi = max(hi, r.end);
    if (tid == 0) s_b[q] = r.begin, s_e[q] = r.end, s_count[q] = 0, s_thr[q] = 0u;
  }
  const int half_row = L.DIp / 2;
  for (int e = tid; e < L.BQ * L.HIp * half_row; e += kThreads) {
    const int q = e / (L.HIp * half_row), h = (e / half_row) % L.HIp, d = 2 * (e % half_row);
    const int i = i0 + q;
    uint32_t v = 0;
    if (i < a.Tq && h < HI) v = mma::load_pair(a.q_I + (size_t(i) * HI + h) * DI, d, DI, di_even);
    *reinterpret_cast<uint32_t*>(sq + (size_t(q) * L.HIp + h) * L.LDQ + d) = v;
  }
  for (int e = tid; e < L.BQ * L.HIp; e += kThreads) {
    const int q = e / L.HIp, h = e % L.HIp, i = i0 + q;
    sw[e] = (i < a.Tq && h < HI) ? __bfloat162float(a.w[size_t(i) * HI + h]) : 0.f;
  }
  __syncthreads();

  for (int base = lo; base < hi; base += kTile) {
    // Make room for one tile of insertions in every row's buffer.
    for (int q = 0; q < L.BQ; ++q) {
      const int n = s_count[q];
      if (n + kTile > L.CAP) {
        const uint32_t pivot = select_top(skey + size_t(q) * L.CAP, sidx + size_t(q) * L.CAP, n, a.K, scr);
        if (tid == 0) s_count[q] = a.K, s_thr[q] = pivot;
        __syncthreads();
      }
    }

    const int wbase = base + warp * kKeysPerWarp;
    uint32_t af[2][KS][4];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const int t0 = wbase + m * 16 + gq, t1 = t0 + 8;
      const bool ok0 = t0 < hi, ok1 = t1 < hi;  // [lo, hi) ⊆ [0, Tp): never touch other rows
      const bf16* r0 = a.k_I + size_t(ok0 ? t0 : 0) * DI;
      const bf16* r1 = a.k_I + size_t(ok1 ? t1 : 0) * DI;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        const int d = ks * 16 + 2 * qq;
        const bool in = ks < nks;
        af[m][ks][0] = (in && ok0) ? mma::load_pair(r0, d, DI, di_even) : 0u;
        af[m][ks][1] = (in && ok1) ? mma::load_pair(r1, d, DI, di_even) : 0u;
        af[m][ks][2] = (in && ok0) ? mma::load_pair(r0, d + 8, DI, di_even) : 0u;
        af[m][ks][3] = (in && ok1) ? mma::load_pair(r1, d + 8, DI, di_even) : 0u;
      }
    }

    for (int q = 0; q < L.BQ; ++q) {
      const int rb = s_b[q], re = s_e[q];
      if (wbase >= re || wbase + kKeysPerWarp <= rb) continue;  // warp-uniform: no visible key here
      const bf16* sqq = sq + size_t(q) * L.HIp * L.LDQ;
      const float* swq = sw + q * L.HIp;
      float sc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
      for (int np = 0; np < npairs; ++np) {
        float acc[2][2][4] = {};
        const bf16* bp = sqq + size_t(np * 16 + mma::bnk_row(lane)) * L.LDQ + mma::bnk_col(lane);
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
          if (ks < nks) {
            uint32_t b[4];
            mma::ldmatrix_x4(b, bp + ks * 16);
#pragma unroll
            for (int m = 0; m < 2; ++m) {
              mma::mma_bf16(acc[m][0], af[m][ks], b[0], b[1]);
              mma::mma_bf16(acc[m][1], af[m][ks], b[2], b[3]);
            }
          }
        }
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const int h = np * 16 + n * 8 + 2 * qq;
          const float w0 = swq[h], w1 = swq[h + 1];
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            sc[m][0] += w0 * phi(acc[m][n][0], a.relu) + w1 * phi(acc[m][n][1], a.relu);
            sc[m][1] += w0 * phi(acc[m][n][2], a.relu) + w1 * phi(acc[m][n][3], a.relu);
          }
        }
      }
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          sc[m][r] += __shfl_xor_sync(0xffffffffu, sc[m][r], 1);
          sc[m][r] += __shfl_xor_sync(0xffffffffu, sc[m][r], 2);
        }
      if (qq < 2) {  // lane q=0 owns row g, lane q=1 row g+8 of each m16 tile
        const int i = i0 + q;
        const uint32_t thr = s_thr[q];
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          const int t = wbase + m * 16 + gq + 8 * qq;
          if (t < rb || t >= re) continue;  // visibility by selection (invisible rows may be NaN)
          const float score = qq == 0 ? sc[m][0] : sc[m][1];
          if (a.scores) a.scores[size_t(i) * a.Tp + t] = score;
          const uint32_t key = order_key(score);
          if (key > thr) {
            const int pos = atomicAdd(&s_count[q], 1);
            skey[size_t(q) * L.CAP + pos] = key;
            sidx[size_t(q) * L.CAP + pos] = t;
          }
        }
      }
    }
    __syncthreads();
  }

  // Final selection and output: K' slots, the selected keys first in canonical order, −1 after.
  for (int q = 0; q < L.BQ; ++q) {
    const int i = i0 + q;
    if (i >= a.Tq) break;
    write_topk_row(skey + size_t(q) * L.CAP, sidx + size_t(q) * L.CAP, s_count[q], a, i, scr);
  }
}

template <int KS>
void launch(const IndexerArgs& a, cudaStream_t s) {
  int dev = 0, optin = 0, per_sm = 0;
  DSA_CUDA_CHECK(cudaGetDevice(&dev));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  DSA_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  const size_t kStatic = 4096;  // static shared memory of the kernel and the per-block reserve, rounded up
  const size_t budget = size_t(optin) - kStatic;
  IndexerLayout L{round_up(a.HI, 16), round_up(a.DI, 16), round_up(a.DI, 16) + 8, 2,
                  round_up(a.K + std::max(a.K, kTile), 32)};
  // Prefer two CTAs of two rows per SM; else the most rows that fit one CTA per SM.
  if (KS > 8 || L.bytes() > size_t(per_sm) / 2 - kStatic) {
    L.BQ = kMaxBQ;
    while (L.BQ > 1 && L.bytes() > budget) L.BQ /= 2;
  }
  if (L.bytes() > budget) L.CAP = round_up(a.K + kTile, 32);
  if (L.bytes() > budget)
    throw InvalidInput("K", "K' = " + std::to_string(a.K) + " with HI = " + std::to_string(a.HI) + ", DI = " +
                                std::to_string(a.DI) + " needs more shared memory than the fused indexer has");
  auto kernel = indexer_topk_kernel<KS>;
  DSA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(L.bytes())));
  const int blocks = (a.Tq + L.BQ - 1) / L.BQ;
  kernel<<<blocks, kThreads, L.bytes(), s>>>(a, L);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void indexer_topk_two_phase(const IndexerArgs& a, cudaStream_t s, const TwoPhaseSizes& sizes) {
  const size_t ld = a.scores ? size_t(a.Tp) : size_t(round_up(a.Tp, 4));  // the workspace's rows: 16-byte loads
  const size_t fit = std::max<size_t>(sizes.workspace_bytes / (ld * sizeof(float)) / 4 * 4, 4);
  const int block = a.scores ? a.Tq : int(std::min(fit, size_t(a.Tq)));
  float* work = a.scores;
  if (!work) DSA_CUDA_CHECK(cudaMallocAsync(&work, size_t(block) * ld * sizeof(float), s));
  struct Free {  // stream-ordered, also when a launch throws
    float* p;
    cudaStream_t s;
    ~Free() {
      if (p) cudaFreeAsync(p, s);
    }
  } free_work{a.scores ? nullptr : work, s};
  for (int row0 = 0; row0 < a.Tq; row0 += block) {
    const ScoreRows rows{work, ld, row0, std::min(block, a.Tq - row0)};
    indexer_scores_sm90(a, rows, s);
    topk_rows(a, rows, s, sizes.cap);
  }
}

IndexerKernel indexer_topk_kernel_for(const IndexerArgs& a) {
  // Not yet two_phase: it has not run on a device (28th session; every start failed).
  return indexer_topk_sm90_fits(a) ? IndexerKernel::wgmma : IndexerKernel::mma;
}

void indexer_topk(const IndexerArgs& a, cudaStream_t s, IndexerKernel kernel) {
  require(a.HI >= 1, "HI", "at least 1");
  require(a.DI >= 1 && a.DI <= 256, "DI", "between 1 and 256 in the fused indexer");
  require(a.K >= 1 && a.K <= a.Tp, "K", "between 1 and Tp (K' = min(K, Tp))");
  if (a.Tq <= 0) return;
  // `best` resolves to a kernel that fits; a forced one is checked (each check queries the driver).
  const bool forced = kernel != IndexerKernel::best;
  if (!forced) kernel = indexer_topk_kernel_for(a);
  const auto refused = [&](const char* which) {
    return std::invalid_argument(std::string("indexer_topk: the ") + which +
                                 " kernel needs an sm_90 device, sm_90a code, HI <= 64 and DI <= 128 (got HI = " +
                                 std::to_string(a.HI) + ", DI = " + std::to_string(a.DI) + ")");
  };
  if (forced && kernel == IndexerKernel::two_phase) {
    if (!indexer_scores_sm90_fits(a)) throw refused("two-phase");
    if (topk_rows_cap(a) == 0)
      throw InvalidInput("K", "K' = " + std::to_string(a.K) + " needs more shared memory than the two-phase indexer's top-k has");
  } else if (forced && kernel == IndexerKernel::wgmma && !indexer_topk_sm90_fits(a)) {
    throw refused("wgmma");
  }
  if (a.scores) {
    const size_t n = size_t(a.Tq) * a.Tp;
    fill_kernel<<<int(std::min<size_t>((n + 255) / 256, 4096)), 256, 0, s>>>(a.scores, n, -__builtin_huge_valf());
    DSA_CUDA_CHECK(cudaGetLastError());
  }
  if (kernel == IndexerKernel::two_phase)
    indexer_topk_two_phase(a, s);
  else if (kernel == IndexerKernel::wgmma)
    indexer_topk_sm90(a, s);
  else if (a.DI <= 128)
    launch<8>(a, s);
  else
    launch<16>(a, s);
}

}  // namespace dsa::fused
