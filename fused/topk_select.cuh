// CTA-wide exact top-m selection over a candidate buffer in shared memory (keys + key indices),
// used by the indexer's streaming top-k. Scores map to order-preserving uint32 keys; a 4-pass
// MSB-first radix select (8 bits a pass, 256-bin histogram) finds the m-th largest key (the
// pivot) and how many elements equal to it still fit, a second select over the indices of the keys
// equal to it (only when they do not all fit) the lowest `rem` of them; an in-place compaction then
// keeps exactly m elements. sort_canonical puts a row's last K' into SPEC §4's canonical order.
#pragma once

#include <cstdint>

namespace dsa::fused {

constexpr int kSelThreads = 256;
constexpr int kSelWarps = kSelThreads / 32;

struct SelectScratch {
  int hist[256];
  int warp_tot[kSelWarps];
  int bin, rem;
  int eq_all;      // after the last pass: how many keys equal the pivot
  uint32_t below;  // mutant topk_lowest_on_ties: the best key strictly below the pivot
};

// Larger score ⇒ larger key; −0 and +0 share a key (they are equal scores).
__device__ __forceinline__ uint32_t order_key(float x) {
  if (x == 0.f) x = 0.f;
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The score an order key came from (−0 comes back as +0: the two share a key).
__device__ __forceinline__ float score_of_key(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Exclusive prefix count of `flag` over the CTA (thread order) and the CTA total.
__device__ __forceinline__ int cta_exclusive_count(bool flag, SelectScratch& s, int& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  if (lane == 0) s.warp_tot[warp] = __popc(ballot);
  __syncthreads();
  int before = __popc(ballot & ((1u << lane) - 1u)), tot = 0;
  for (int w = 0; w < kSelWarps; ++w) {
    const int c = s.warp_tot[w];
    if (w < warp) before += c;
    tot += c;
  }
  __syncthreads();
  total = tot;
  return before;
}

// The m-th largest of value(i) over the i < n with in(i) (1 ≤ m ≤ their count), MSB first, and
// how many of them equal it (eq) and how many of those the m largest take (rem). All kSelThreads
// threads must call it.
struct RadixPick {
  uint32_t value;
  int rem, eq;
};
template <class Value, class In>
inline __device__ RadixPick radix_pick(int n, int m, Value value, In in, SelectScratch& s) {
  const int tid = threadIdx.x, lane = tid & 31;
  uint32_t prefix = 0, mask = 0;
  int rem = m, eq = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += kSelThreads) s.hist[b] = 0;
    __syncthreads();
    for (int i = tid; i < n; i += kSelThreads) {
      if (!in(i)) continue;
      const uint32_t k = value(i);
      if ((k & mask) == prefix) atomicAdd(&s.hist[(k >> shift) & 255u], 1);
    }
    __syncthreads();
    if (tid < 32) {  // lane l owns bins 255−8l … 248−8l, scanned from the top
      int c[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum += (c[j] = s.hist[255 - 8 * lane - j]);
      int incl = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, incl >= rem);
      if (lane == __ffs(hit) - 1) {
        int acc = incl - sum;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (acc + c[j] >= rem) {
            s.bin = 255 - 8 * lane - j;
            s.rem = rem - acc;
            s.eq_all = c[j];
            break;
          }
          acc += c[j];
        }
      }
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(s.bin) << shift;
    mask |= 255u << shift;
    rem = s.rem;
    eq = s.eq_all;
    __syncthreads();
  }
  return {prefix, rem, eq};
}

// Keeps exactly m of the n > m elements (key[], idx[], idx ≥ 0 and distinct): the m largest keys,
// ties at the boundary to the lower indices (SPEC §4's canonical order), so the kept set does not
// depend on the buffer's order. Returns the pivot: every kept key is ≥ it, every dropped key ≤ it,
// so a later candidate needs key > pivot to matter (later candidates have higher indices: a tie
// with the pivot loses). The kept elements stay in buffer order. All kSelThreads threads must call it.
inline __device__ uint32_t select_top(uint32_t* key, int32_t* idx, int n, int m, SelectScratch& s) {
  const int tid = threadIdx.x;
  const RadixPick p = radix_pick(n, m, [&](int i) { return key[i]; }, [](int) { return true; }, s);
  const uint32_t pivot = p.value;
  const int rem = p.rem;
  // Of the keys equal to the pivot, the rem with the lowest indices: ~idx at or above tie_cut.
  uint32_t tie_cut = 0;
  if (p.eq > rem)
    tie_cut = radix_pick(n, rem, [&](int i) { return ~static_cast<uint32_t>(idx[i]); },
                         [&](int i) { return key[i] == pivot; }, s).value;
#if DSA_MUTANT_topk_lowest_on_ties
  // Planted: when the boundary tie continues past slot m, its last slot goes to the best key
  // strictly below the tie.
  const bool tie_past_end = p.eq > rem;
  if (tid == 0) s.below = 0;
  __syncthreads();
  for (int i = tid; i < n; i += kSelThreads)
    if (key[i] < pivot) atomicMax(&s.below, key[i]);
  __syncthreads();
  const uint32_t below = tie_past_end && s.below != 0 ? s.below : 0xffffffffu;
  bool below_taken = false;
#endif
  // In-place compaction, chunk by chunk: a chunk is read before any of it is overwritten, and
  // writes land at or before the reading position.
  int out = 0;
  for (int base = 0; base < n; base += kSelThreads) {
    const int i = base + tid;
    const bool in = i < n;
    const uint32_t k = in ? key[i] : 0u;
    const int32_t id = in ? idx[i] : -1;
    const bool eq = in && k == pivot;
    bool keep = (in && k > pivot) || (eq && ~static_cast<uint32_t>(id) >= tie_cut);
#if DSA_MUTANT_topk_lowest_on_ties
    if (below != 0xffffffffu) {
      if (eq && ~static_cast<uint32_t>(id) == tie_cut) keep = false;  // the kept tie with the highest index
      int below_tot = 0;
      const bool cand = in && !below_taken && k == below;
      const int cand_before = cta_exclusive_count(cand, s, below_tot);
      if (cand && cand_before == 0) keep = true;
      below_taken = below_taken || below_tot > 0;
    }
#endif
    int keep_tot = 0;
    const int pos = out + cta_exclusive_count(keep, s, keep_tot);
    if (keep) {
      key[pos] = k;
      idx[pos] = id;
    }
    out += keep_tot;
    __syncthreads();
  }
  return pivot;
}

// Sorts n (key, idx) pairs into SPEC §4's canonical order, key descending and ties to the lower
// index, so that a row's slots do not depend on the order its candidates reached the buffer. A
// bitonic network whose every compare-exchange puts the earlier element first, so the padding up
// to a power of two (virtual elements after every real one) never moves and is never touched.
// All kSelThreads threads must call it.
inline __device__ void sort_canonical(uint32_t* key, int32_t* idx, int n) {
  int P = 1;
  while (P < n) P <<= 1;
  for (int k = 2; k <= P; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int t = threadIdx.x; t < P / 2; t += kSelThreads) {
        int a, b;
        if (j == k >> 1) {  // the first step of a merge compares mirrored pairs of the k-block
          a = (t / j) * k + t % j;
          b = (t / j) * k + k - 1 - t % j;
        } else {
          a = (t / j) * 2 * j + t % j;
          b = a + j;
        }
        if (b >= n) continue;
        const uint32_t ka = key[a], kb = key[b];
        const int32_t ia = idx[a], ib = idx[b];
        if (kb > ka || (kb == ka && ib < ia)) {
          key[a] = kb, key[b] = ka;
          idx[a] = ib, idx[b] = ia;
        }
      }
      __syncthreads();
    }
}

}  // namespace dsa::fused
