// SPEC.md §4: whether a backend's top-k row is a legal equivalent of the canonical one.
#pragma once

#include <cstdint>
#include <string>

namespace dsa {

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
