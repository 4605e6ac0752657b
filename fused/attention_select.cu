// Key selection S(g) (SPEC.md §5): the usable slots of a row of indices, as a set. A row may hold
// the same key twice (injected indices, a buggy indexer); S(g) counts it once, so each row is
// sorted and de-duplicated here, once, for the forward, the backward and the sparse KL alike.
// Planted bugs (README "Planted kernel bugs") that concern which keys a row may use live here.
#include <climits>
#include <stdexcept>

#include "fused/attention.hpp"
#include "fused/cuda_check.hpp"

namespace dsa::fused {

namespace {

constexpr int kThreads = 256;
constexpr int kUnused = INT_MAX;  // sorts after every key

// Whether slot t of a row is usable: a key the row may see (never trusting the indexer).
__device__ bool usable(int t, int Tp, int kb, int ke) { return t >= 0 && t < Tp && t >= kb && t < ke; }

// One block per query row. buf holds P = next_pow2(K) keys (and vbuf their values, when the
// slots carry any): shared memory when it fits, else a global scratch slice of the row. Bitonic
// sort (ascending, unused slots last), then keep the first of each run of equal keys, compacted in
// sorted order (slot order is free: SPEC §4).
__global__ void select_keys_kernel(SelectArgs a, int P, int32_t* scratch) {
  extern __shared__ int32_t smem[];
  const int row = blockIdx.x;
  int32_t* buf = scratch ? scratch + (int64_t)row * P : smem;
  float* vbuf = nullptr;  // scratch: [Tq, P] keys, then [Tq, P] values
  if (a.values) vbuf = reinterpret_cast<float*>(scratch ? scratch + (int64_t)a.Tq * P + (int64_t)row * P : smem + P);
  const int kb = a.rows.key_begin[row];
  int ke = a.rows.key_end[row];
#if DSA_MUTANT_causal_end_off_by_one
  if (ke > kb) ke += 1;  // the row also sees the key right after it
#endif
  const int32_t* idx = a.indices + (int64_t)row * a.K;
  for (int i = threadIdx.x; i < P; i += kThreads) {
    int t = i < a.K ? idx[i] : -1;
    bool ok = usable(t, a.Tp, kb, ke);
#if DSA_MUTANT_trust_noncausal_indices
    ok = t >= 0 && t < a.Tp;  // trusts the indexer for causality
#endif
#if DSA_MUTANT_neg1_read_as_row0
    if (i < a.K && t == -1) { t = 0; ok = true; }  // an empty slot reads key row 0 unchecked
#endif
    buf[i] = ok ? t : kUnused;
    if (vbuf) vbuf[i] = i < a.K ? a.values[(int64_t)row * a.K + i] : 0.f;
  }
  __syncthreads();
  for (int k = 2; k <= P; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < P; i += kThreads) {
        const int l = i ^ j;
        if (l > i) {
          const int32_t x = buf[i], y = buf[l];
          if ((x > y) == ((i & k) == 0)) {
            buf[i] = y, buf[l] = x;
            if (vbuf) {
              const float v = vbuf[i];
              vbuf[i] = vbuf[l], vbuf[l] = v;
            }
          }
        }
      }
      __syncthreads();
    }
  // Compact the first of each run in order: each thread owns a contiguous chunk of the sorted keys.
  __shared__ int s_n[kThreads];
  const int chunk = (P + kThreads - 1) / kThreads;
  const int lo = min(P, threadIdx.x * chunk), hi = min(P, lo + chunk);
  auto keep = [&](int i) {
    const int32_t t = buf[i];
#if DSA_MUTANT_duplicate_keys_counted
    return t != kUnused;  // a key repeated in the row is attended once per repeat
#else
    return t != kUnused && (i == 0 || buf[i - 1] != t);
#endif
  };
  int mine = 0;
  for (int i = lo; i < hi; ++i) mine += keep(i);
  s_n[threadIdx.x] = mine;
  __syncthreads();
  for (int off = 1; off < kThreads; off <<= 1) {  // inclusive scan of the chunk counts
    const int v = threadIdx.x >= off ? s_n[threadIdx.x - off] : 0;
    __syncthreads();
    s_n[threadIdx.x] += v;
    __syncthreads();
  }
  const int n = s_n[kThreads - 1];
  int32_t* sel = a.sel + (int64_t)row * a.K;
  int out = s_n[threadIdx.x] - mine;
  float* sel_values = a.values ? a.sel_values + (int64_t)row * a.K : nullptr;
  for (int i = lo; i < hi; ++i)
    if (keep(i)) {
      if (sel_values) sel_values[out] = vbuf[i];
      sel[out++] = buf[i];
    }
  for (int slot = n + threadIdx.x; slot < a.K; slot += kThreads) {
    sel[slot] = -1;
    if (sel_values) sel_values[slot] = -__builtin_huge_valf();
  }
  if (threadIdx.x == 0) a.count[row] = n;
}

}  // namespace

void select_keys(const SelectArgs& a, cudaStream_t s) {
  if (a.Tq <= 0) return;
  int P = 1;
  while (P < a.K) P <<= 1;
  if (a.values && !a.sel_values) throw std::logic_error("select_keys: values without sel_values");
  // Up to 128 KiB of keys (and values) sort in shared memory; wider rows sort in a global scratch.
  const size_t bytes = size_t(P) * (a.values ? 8 : 4);
  constexpr size_t kMaxShared = size_t(128) * 1024;
  int32_t* scratch = nullptr;
  if (bytes > kMaxShared) {
    DSA_CUDA_CHECK(cudaMallocAsync(&scratch, bytes * a.Tq, s));
  } else if (bytes > 48 * 1024) {
    DSA_CUDA_CHECK(cudaFuncSetAttribute(select_keys_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kMaxShared));
  }
  select_keys_kernel<<<a.Tq, kThreads, scratch ? 0 : bytes, s>>>(a, P, scratch);
  DSA_CUDA_CHECK(cudaGetLastError());
  if (scratch) DSA_CUDA_CHECK(cudaFreeAsync(scratch, s));
}

}  // namespace dsa::fused
