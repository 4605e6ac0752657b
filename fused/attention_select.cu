// Key selection S(g) (SPEC.md §5): the usable slots of a row of indices, compacted in slot order.
// Planted bugs (README "Planted kernel bugs") that concern which keys a row may use live here.
#include "fused/attention.hpp"
#include "fused/cuda_check.hpp"

namespace dsa::fused {

namespace {

// One warp per query row: ballot the usable slots of 32 at a time and append them in order.
__global__ void select_keys_kernel(SelectArgs a) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= a.Tq) return;
  const int kb = a.rows.key_begin[row];
  int ke = a.rows.key_end[row];
#if DSA_MUTANT_causal_end_off_by_one
  if (ke > kb) ke += 1;  // the row also sees the key right after it
#endif
  const int32_t* idx = a.indices + (int64_t)row * a.K;
  int32_t* sel = a.sel + (int64_t)row * a.K;
  int n = 0;
  for (int base = 0; base < a.K; base += 32) {
    const int slot = base + lane;
    int t = slot < a.K ? idx[slot] : -1;
    bool ok = t >= 0 && t < a.Tp && t >= kb && t < ke;
#if DSA_MUTANT_trust_noncausal_indices
    ok = t >= 0 && t < a.Tp;  // trusts the indexer for causality
#endif
#if DSA_MUTANT_neg1_read_as_row0
    if (slot < a.K && t == -1) { t = 0; ok = true; }  // an empty slot reads key row 0 unchecked
#endif
    const unsigned m = __ballot_sync(0xffffffffu, ok);
    if (ok) sel[n + __popc(m & ((1u << lane) - 1u))] = t;
    n += __popc(m);
  }
  for (int slot = n + lane; slot < a.K; slot += 32) sel[slot] = -1;
  if (lane == 0) a.count[row] = n;
}

}  // namespace

void select_keys(const SelectArgs& a, cudaStream_t s) {
  if (a.Tq <= 0) return;
  const int warps = 8;
  select_keys_kernel<<<(a.Tq + warps - 1) / warps, warps * 32, 0, s>>>(a);
  DSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsa::fused
