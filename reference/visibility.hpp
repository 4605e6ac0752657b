// Which keys a query row may use (SPEC.md §2, §5), with the planted visibility bugs applied.
#pragma once

#include <cstdint>
#include <limits>

#include "core/layout.hpp"
#include "core/mutant.hpp"

namespace dsa {

struct Visibility {
  const StreamLayout& L;
  Mutant mutant = Mutant::none;

  int64_t begin(int64_t g) const {
    int64_t b = L.key_begin(g);
    if (mutant == Mutant::pad_keys_visible && L.active(g) && L.seg[g] > 0) {
      const int64_t prev = L.seg[g] - 1;  // the previous segment's pad tail
      b = L.cu[prev] + L.lengths[prev];
    }
    return b;
  }
  int64_t end(int64_t g) const {
    int64_t e = L.key_end(g);
    if (mutant == Mutant::causal_end_off_by_one && L.active(g) && e < L.cu[L.seg[g] + 1]) ++e;
    return e;
  }
  bool visible(int64_t g, int64_t t) const { return t >= begin(g) && t < end(g); }

  // The key an attention index slot refers to, or −1 when the slot must be ignored.
  int64_t attention_key(int64_t g, int64_t t) const {
    if (mutant == Mutant::neg1_read_as_row0 && t == -1) return 0;
    if (t < 0 || t >= L.tp) return -1;
    if (mutant == Mutant::trust_noncausal_indices) return t;
    return visible(g, t) ? t : -1;
  }
};

}  // namespace dsa
