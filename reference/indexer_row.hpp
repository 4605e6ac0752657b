// The indexer scores of one query row's visible keys (SPEC.md §3), computed directly: for cases
// too large for the reference to return the [Tp, Tp] score matrix, the top-k equivalence test and
// the score tolerance read them row by row.
#pragma once

#include <cstdint>
#include <vector>

#include "core/inputs.hpp"
#include "core/layout.hpp"
#include "core/problem.hpp"

namespace dsa {

// I[g, key_begin(g) + i] for every visible key, in fp64 (exact) or with the bf16 policy's fp32
// products and sums over the same bf16 inputs.
std::vector<double> indexer_score_row(const Problem& p, const Inputs& in, const StreamLayout& L, int64_t g,
                                      Precision precision);

}  // namespace dsa
