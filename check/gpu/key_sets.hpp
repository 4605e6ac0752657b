// Host side of the key sets (SPEC.md §5): S(g) from an index row, and the planning of row chunks
// so that the padded [rows, kmax, ...] buffers of a chunk stay within a memory budget.
#pragma once

#include <cstdint>
#include <vector>

#include "core/layout.hpp"
#include "core/tensor.hpp"

namespace dsa::gpu {

// S(g) of every global row as CSR: the valid (0 <= t < Tp), visible, distinct keys of row g of
// idx, ascending. −1, INT_MIN, Tp and beyond, future keys and every key of a masked pad row are
// dropped; a duplicate counts once.
struct KeySets {
  std::vector<int64_t> offset;  // [Tp + 1]
  std::vector<int32_t> count;   // [Tp]
  std::vector<int32_t> keys;    // [offset[Tp]]
};
KeySets select_keys(const StreamLayout& L, const TensorI& idx);

// Consecutive global rows [r0, r1) whose key sets fit kmax slots each.
struct Chunk {
  int64_t r0 = 0, r1 = 0, kmax = 0;
  int64_t rows() const { return r1 - r0; }
};
// Greedy: a chunk grows while rows·kmax <= slot_budget and rows <= row_cap (a single row always
// fits). Chunks whose rows have no key at all are dropped: their outputs keep their initial values
// (zeros, lse −inf), which is what an empty S(g) gives.
std::vector<Chunk> plan_chunks(const std::vector<int32_t>& count, int64_t slot_budget, int64_t row_cap);

}  // namespace dsa::gpu
