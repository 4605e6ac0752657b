// CTA-wide exact top-m selection over a candidate buffer in shared memory (keys + key indices),
// used by the indexer's streaming top-k. Scores map to order-preserving uint32 keys; a 4-pass
// MSB-first radix select (8 bits a pass, 256-bin histogram) finds the m-th largest key (the
// pivot) and how many elements equal to it still fit; an in-place, order-preserving compaction
// then keeps exactly m elements: every key above the pivot and the first `rem` equal to it.
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

// Keeps exactly m of the n > m elements (key[], idx[]): the m largest keys, ties at the boundary
// resolved by buffer order. Returns the pivot: every kept key is ≥ it, every dropped key ≤ it, so
// a later candidate needs key > pivot to matter. All kSelThreads threads must call it.
__device__ uint32_t select_top(uint32_t* key, int32_t* idx, int n, int m, SelectScratch& s) {
  const int tid = threadIdx.x, lane = tid & 31;
  uint32_t prefix = 0, mask = 0;
  int rem = m;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += kSelThreads) s.hist[b] = 0;
    __syncthreads();
    for (int i = tid; i < n; i += kSelThreads) {
      const uint32_t k = key[i];
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
    __syncthreads();
  }
  const uint32_t pivot = prefix;
#if DSA_MUTANT_topk_lowest_on_ties
  // Planted: when the boundary tie continues past slot m, its last slot goes to the best key
  // strictly below the tie.
  const bool tie_past_end = s.eq_all > rem;
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
  int out = 0, eq_seen = 0;
  for (int base = 0; base < n; base += kSelThreads) {
    const int i = base + tid;
    const bool in = i < n;
    const uint32_t k = in ? key[i] : 0u;
    const int32_t id = in ? idx[i] : -1;
    const bool eq = in && k == pivot;
    int eq_tot = 0;
    const int eq_before = eq_seen + cta_exclusive_count(eq, s, eq_tot);
    bool keep = (in && k > pivot) || (eq && eq_before < rem);
#if DSA_MUTANT_topk_lowest_on_ties
    if (below != 0xffffffffu) {
      if (eq && eq_before == rem - 1) keep = false;
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
    eq_seen += eq_tot;
    __syncthreads();
  }
  return pivot;
}

}  // namespace dsa::fused
