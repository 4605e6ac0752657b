// Packing, padding and CP sharding of a THD stream (SPEC.md §1–§2).
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.hpp"

namespace dsa {

struct StreamLayout {
  int64_t tp = 0;                    // padded stream length Tp
  int64_t cp = 1;
  Layout kind = Layout::zigzag;
  PadRows pad_rows = PadRows::attend;
  std::vector<int64_t> cu;           // segment starts, size segments+1; contiguous adds a trailing pad segment
  std::vector<int64_t> lengths;      // real length of each segment (the trailing pad segment has 0)
  std::vector<int32_t> seg;          // [Tp] segment of each row
  std::vector<uint8_t> real;         // [Tp] 1 where pos < L_seg
  std::vector<std::vector<int64_t>> rank_rows;  // [cp][Tp/cp] global rows in local order

  int64_t segments() const { return static_cast<int64_t>(lengths.size()); }
  int64_t rows_per_rank() const { return tp / cp; }
  int64_t pos(int64_t g) const { return g - cu[seg[g]]; }
  bool is_real(int64_t g) const { return real[g] != 0; }
  // A row that takes part at all: real rows, and pad rows under pad_rows=attend.
  bool active(int64_t g) const { return real[g] || pad_rows == PadRows::attend; }
  // Visible keys of row g are [key_begin(g), key_end(g)); empty for masked pad rows.
  int64_t key_begin(int64_t g) const { return cu[seg[g]]; }
  int64_t key_end(int64_t g) const { return active(g) ? g + 1 : cu[seg[g]]; }
  bool visible(int64_t g, int64_t t) const { return t >= key_begin(g) && t < key_end(g); }
  // Rows counted in the loss denominator N (at least 1 is enforced by the loss).
  int64_t counted_rows() const;
  // (rank, local index) of a global row.
  std::pair<int64_t, int64_t> owner(int64_t g) const;
  // Global rows in all-gather order (rank 0's rows, then rank 1's, ...).
  std::vector<int64_t> gathered_order() const;
};

// Width of a top-k row: K' = min(K, Tp).
inline int64_t topk_width(int64_t k, int64_t tp) { return k < tp ? k : tp; }

// Validates seqlens and cp (InvalidInput on error) and builds the layout.
StreamLayout make_layout(const std::vector<int64_t>& seqlens, const CpSpec& cp,
                         PadRows pad_rows = PadRows::attend);

}  // namespace dsa
