// Top-k selection (SPEC.md §4): the canonical order. The equivalence test of a backend's rows is
// check/topk_equivalent.hpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/mutant.hpp"

namespace dsa {

// Canonical top-k of one row: keys key_begin + i for scores[i], sorted by score descending, ties
// by the lower key; the first min(width, scores.size()) fill out[0..), the rest are −1.
void topk_canonical(const double* scores, int64_t count, int64_t key_begin, int64_t width, int32_t* out,
                    Mutant mutant = Mutant::none);

}  // namespace dsa
