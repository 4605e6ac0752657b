// Top-k selection (SPEC.md §4): the canonical order and the equivalence test for fused rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/plant.hpp"

namespace dsa {

// Canonical top-k of one row: keys key_begin + i for scores[i], sorted by score descending, ties
// by the lower key; the first min(width, scores.size()) fill out[0..), the rest are −1.
void topk_canonical(const double* scores, int64_t count, int64_t key_begin, int64_t width, int32_t* out,
                    Plant plant = Plant::none);

struct TopkVerdict {
  bool ok = true;
  std::string why;  // empty when ok
};

// SPEC.md §4 equivalence of one fused row against the exact scores of its visible keys
// (exact[i] is the score of key key_begin + i): no repeated key, every key visible, the right
// count, and every selected score ≥ θ − delta where θ is the count-th best exact score.
TopkVerdict topk_equivalent(const int32_t* row, int64_t width, const double* exact, int64_t count,
                            int64_t key_begin, double delta);

}  // namespace dsa
