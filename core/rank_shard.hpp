// One CP rank's share of a case: the rows of the inputs it holds (shard_inputs) and what it
// returns (RankResult), and the global Result assembled from every rank's (assemble_ranks). Shared
// by the reference's ranks (reference/core.hpp) and the fused ones (fused/run.hpp), so that a rank
// in a process of its own (`--comm mpi`) sends the same thing whichever backend it runs.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/inputs.hpp"
#include "core/layout.hpp"
#include "core/result.hpp"

namespace dsa {

// What one CP rank of a sharded run returns: its local query rows in the rank's own order
// (StreamLayout::rank_rows), its key rows' gradients summed over ranks, and the weight gradients
// and the loss summed over ranks (identical on every rank).
struct RankResult {
  TensorD scores;  // [Tq, Tp] or empty (not materialized)
  TensorI topk;
  TensorD O, O_lat, lse, kl, dq_nope, dq_pe, dq_I, dw;  // local rows
  TensorD dc, dk_pe, dk_I;                              // local rows, reduced over ranks
  TensorD dW_UK, dW_UV;                                 // reduced over ranks
  double loss = 0;
  std::optional<KinkSlack> kink;  // global (reduced over ranks): every rank holds the same
  std::optional<DeltaSlack> delta;  // likewise
};

// The global Result of every rank's RankResult, rank q's local row i being global row
// own_rows[q][i]. Tensors a rank left empty (a stage not run) stay empty.
Result assemble_ranks(const StreamLayout& L, const std::vector<RankResult>& ranks,
                      const std::vector<std::vector<int64_t>>& own_rows);
// The same with every rank's own rows (L.rank_rows).
Result assemble_ranks(const StreamLayout& L, const std::vector<RankResult>& ranks);
// assemble_ranks of one rank holding rows 0 … Tp−1 in order: its tensors are the global ones,
// moved instead of copied (at production widths they are gigabytes).
Result assemble_whole(RankResult&& rank);

// The rows `rows` (global stream rows, in that order) of every row tensor of in (all but the
// weights W_UK, W_UV, which are kept whole): the inputs a rank needs, [rows.size(), ...] each.
Inputs shard_inputs(const Inputs& in, const std::vector<int64_t>& rows);

}  // namespace dsa
