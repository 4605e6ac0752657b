// SPEC §4's top-k of rows whose scores are in memory, one CTA (kSelThreads threads) a row.
//
// A row of n visible keys that fits the candidate buffer (n ≤ CAP) is read into it whole. A longer
// one first narrows down where its K'-th key lies, MSB first, with radix passes over global memory
// (11, 11, then 10 bits of the order key; a 2048-bin shared histogram), each reading only the keys
// still in play, until the keys at or above the prefix found so far fit the buffer: those are
// gathered (the K' − rem above it and the bin's own) and the buffer's select (topk_select.cuh)
// keeps K'. Only when the K'-th key ties with more keys than the buffer holds do all 32 bits pass;
// then the prefix is that key: the keys above it are gathered, and of the tie the rem lowest
// indices, in index order. The row is then written as the streaming kernels write theirs
// (write_topk_row: canonical order, −1 after, the slot scores). Deterministic: gathered slots vary
// run to run, the select and the canonical sort do not depend on them.
#include "fused/topk_rows.hpp"

#include <algorithm>
#include <cstdint>

#include "fused/cuda_check.hpp"
#include "fused/indexer_rows.cuh"
#include "fused/topk_select.cuh"

namespace dsa::fused {
namespace {

constexpr int kThreads = kSelThreads;
constexpr int kBins = 2048;  // the first two passes' 11 bits (the last pass takes 10)
constexpr int kStatic = 2048;  // static shared memory and the per-block reserve, rounded up

__host__ __device__ inline size_t smem_bytes(int cap) { return size_t(cap) * 8 + kBins * 4; }

// The bin of hist[0, bins) (bins = 1024 or 2048) that holds the rem-th largest key, scanned from the
// top: s.bin, s.rem (how many of that bin the rem largest take) and s.eq_all (the bin's count).
// All threads; hist is complete on entry.
__device__ __forceinline__ void pick_bin(const int* hist, int bins, int rem, SelectScratch& s) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per = bins / kThreads;  // 8 or 4 bins a thread: thread t owns bins − 1 − per·t − j
  int c[8], sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) sum += (c[j] = j < per ? hist[bins - 1 - per * tid - j] : 0);
  int incl = sum;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) s.warp_tot[warp] = incl;
  __syncthreads();
  for (int w = 0; w < warp; ++w) incl += s.warp_tot[w];
  int acc = incl - sum;
  if (acc < rem && incl >= rem) {  // exactly one thread
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (acc + c[j] >= rem) {
        s.bin = bins - 1 - per * tid - j;
        s.rem = rem - acc;
        s.eq_all = c[j];
        break;
      }
      acc += c[j];
    }
  }
  __syncthreads();
}

// f(t, score, valid) over the quads of 4 keys that cover [begin, end) of row (valid: t in the
// range), 4 quads a thread in flight: one 16-byte load each where the row is 16-byte aligned (vec),
// else 4 scalar loads of the range's keys. Every thread makes the same number of calls
// (CTA-uniform), so f may take warp collectives.
template <class F>
__device__ __forceinline__ void for_each_score(const float* row, int begin, int end, bool vec, F f) {
  constexpr int U = 4;
  const int qb = begin >> 2, qe = (end + 3) >> 2;
  for (int q0 = qb; q0 < qe; q0 += U * kThreads) {
    float v[U][4];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int q = q0 + u * kThreads + int(threadIdx.x);
      if (vec && q < qe) {
        const float4 x = *reinterpret_cast<const float4*>(row + 4 * q);
        v[u][0] = x.x, v[u][1] = x.y, v[u][2] = x.z, v[u][3] = x.w;
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int t = 4 * q + e;
          v[u][e] = q < qe && t >= begin && t < end ? row[t] : 0.f;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = 4 * (q0 + u * kThreads + int(threadIdx.x)) + e;
        f(t, v[u][e], t >= begin && t < end);
      }
  }
}

// Appends (key, t) to the buffer where take: one shared atomic a warp. Warp-uniform call.
__device__ __forceinline__ void append(bool take, uint32_t key, int t, uint32_t* skey, int32_t* sidx, int* count) {
  const int lane = threadIdx.x & 31;
  const unsigned ballot = __ballot_sync(0xffffffffu, take);
  if (!ballot) return;
  const int leader = __ffs(ballot) - 1;
  int base = 0;
  if (lane == leader) base = atomicAdd(count, __popc(ballot));
  base = __shfl_sync(0xffffffffu, base, leader);
  if (take) {
    const int pos = base + __popc(ballot & ((1u << lane) - 1u));
    skey[pos] = key;
    sidx[pos] = t;
  }
}

__global__ void __launch_bounds__(kThreads) topk_rows_kernel(const IndexerArgs a, const ScoreRows in, int CAP) {
  extern __shared__ __align__(16) unsigned char smem[];
  uint32_t* skey = reinterpret_cast<uint32_t*>(smem);
  int32_t* sidx = reinterpret_cast<int32_t*>(skey + CAP);
  int* hist = reinterpret_cast<int*>(sidx + CAP);
  __shared__ SelectScratch scr;
  __shared__ int s_count;

  const int tid = threadIdx.x;
  const int i = in.row0 + in.rows - 1 - int(blockIdx.x);  // the latest (longest) rows first
  const KeyRange r = visible_range(a.rows, i, a.Tp);
  const int begin = r.begin, end = max(r.begin, r.end), n = end - begin;
  const float* row = in.scores + size_t(i - in.row0) * in.ld;

  const bool vec = in.ld % 4 == 0 && reinterpret_cast<uintptr_t>(in.scores) % 16 == 0;

  if (n <= CAP) {
    for_each_score(row, begin, end, vec, [&](int t, float x, bool valid) {
      if (valid) skey[t - begin] = order_key(x), sidx[t - begin] = t;
    });
    __syncthreads();
    write_topk_row(skey, sidx, n, a, i, scr);
    return;
  }

  uint32_t prefix = 0, mask = 0;  // the K'-th key's high bits found so far
  int rem = a.K;                  // how many of the keys under the prefix the K' largest take
  if (tid == 0) s_count = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0, bins = pass < 2 ? kBins : kBins / 2;
    for (int b = tid; b < bins; b += kThreads) hist[b] = 0;
    __syncthreads();
    for_each_score(row, begin, end, vec, [&](int, float x, bool valid) {
      const uint32_t k = order_key(x);
      if (valid && (k & mask) == prefix) atomicAdd(&hist[(k >> shift) & uint32_t(bins - 1)], 1);
    });
    __syncthreads();
    pick_bin(hist, bins, rem, scr);
    prefix |= uint32_t(scr.bin) << shift;
    mask |= uint32_t(bins - 1) << shift;
    rem = scr.rem;
    const int held = a.K - rem + scr.eq_all;  // keys at or above the prefix: (k & mask) >= prefix
    __syncthreads();                          // scr is read by every thread before its next use
    if (held <= CAP) {
      for_each_score(row, begin, end, vec, [&](int t, float x, bool valid) {
        const uint32_t k = order_key(x);
        append(valid && k >= prefix, k, t, skey, sidx, &s_count);
      });
      __syncthreads();
      write_topk_row(skey, sidx, held, a, i, scr);
      return;
    }
  }

  // prefix is the K'-th key itself, tied with more keys than the buffer holds: the K' − rem keys
  // above it, then the rem tied keys of lowest index (SPEC §4's tie rule), in index order.
  for_each_score(row, begin, end, vec, [&](int t, float x, bool valid) {
    const uint32_t k = order_key(x);
    append(valid && k > prefix, k, t, skey, sidx, &s_count);
  });
  const int above = a.K - rem;
  int taken = 0;
  for (int t0 = begin; t0 < end && taken < rem; t0 += kThreads) {  // taken is CTA-uniform
    const int t = t0 + tid;
    const bool tie = t < end && order_key(row[t]) == prefix;
    int total = 0;
    const int before = taken + cta_exclusive_count(tie, scr, total);
    if (tie && before < rem) skey[above + before] = prefix, sidx[above + before] = t;
    taken += total;
  }
  __syncthreads();
  write_topk_row(skey, sidx, a.K, a, i, scr);
}

int cap_for(const IndexerArgs& a, int optin) {
  const int want = std::max((2 * a.K + 31) / 32 * 32, (a.K + 256 + 31) / 32 * 32);
  const int fit = std::max(optin - kStatic - int(smem_bytes(0)), 0) / 8 / 32 * 32;
  const int cap = std::min(want, fit);
  return cap >= a.K ? cap : 0;
}

}  // namespace

int topk_rows_cap(const IndexerArgs& a) {
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return cap_for(a, optin);
}

void topk_rows(const IndexerArgs& a, const ScoreRows& in, cudaStream_t s, int cap) {
  if (in.rows <= 0) return;
  const int CAP = cap > 0 ? (std::max(cap, a.K) + 31) / 32 * 32 : topk_rows_cap(a);
  const size_t bytes = smem_bytes(CAP);
  DSA_CUDA_CHECK(cudaFuncSetAttribute(topk_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  topk_rows_kernel<<<in.rows, kThreads, bytes, s>>>(a, in, CAP);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::fused
