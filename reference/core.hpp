// The whole DSA core (SPEC.md §3–§7): indexer, top-k, sparse attention forward and backward, the
// indexer loss and its backward; globally, or rank by rank under CP.
#pragma once

#include <optional>

#include "reference/inputs.hpp"
#include "reference/layout.hpp"
#include "reference/plant.hpp"
#include "reference/problem.hpp"
#include "reference/result.hpp"

namespace dsa {

struct RunOptions {
  Precision precision = Precision::exact;
  // Indices the attention and loss use instead of the indexer's own top-k, [Tp, K'] in global
  // rows: adversarial injection (SPEC.md §10), or the fused backend's top-k when stages are
  // compared decoupled (SPEC.md §9). The indexer's top-k is still computed and returned.
  std::optional<TensorI> attention_indices;
  bool streaming_kl = true;           // sparse loss: streaming form (SPEC.md §7)
  int64_t kl_chunk_rows = 64;         // rows per chunk of the streaming KL
  int64_t max_score_elements = 1 << 22;  // scores are returned only when Tp² is at most this
  Plant plant = Plant::none;          // a planted bug (mutant backends only)
  bool attention_backward = true;     // false: forward stages and the loss only (benchmarks)
};

// Global execution: one rank holding every row.
Result run_core(const Problem& p, const Inputs& in, const RunOptions& opt);

// Rank-by-rank execution over an in-process communicator (cp threads). Each rank sees only its
// own query rows and all-gathers the keys; key gradients are reduce-scattered. The per-rank
// results are mapped back to global rows, so the return value compares directly with run_core.
Result run_core_sharded(const Problem& p, const Inputs& in, const RunOptions& opt);

}  // namespace dsa
