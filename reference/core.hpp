// The whole DSA core (SPEC.md §3–§7): indexer, top-k, sparse attention forward and backward, the
// indexer loss and its backward; globally, or rank by rank under CP.
#pragma once

#include <optional>

#include "core/inputs.hpp"
#include "core/layout.hpp"
#include "core/mutant.hpp"
#include "core/problem.hpp"
#include "core/rank_shard.hpp"
#include "core/result.hpp"
#include "reference/comm.hpp"

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
  Mutant mutant = Mutant::none;          // a planted bug (mutant backends only)
  bool attention_backward = true;     // false: forward stages and the loss only (benchmarks)
  // The staged oracle (check/) runs the indexer and the stages after it apart: indexer = false
  // skips the scores and the top-k (attention_indices are then required), attention = false stops
  // after them.
  bool indexer = true;
  bool attention = true;
};

// Global execution: one rank holding every row.
Result run_core(const Problem& p, const Inputs& in, const RunOptions& opt);
// The same on a problem already validated and laid out (check/prepared.hpp): nothing is rebuilt.
Result run_core(const Problem& p, const StreamLayout& L, const Inputs& in, const RunOptions& opt);

// RankResult (what one CP rank returns) and assemble_ranks are in core/rank_shard.hpp.

// Rank comm.rank() of the sharded run over comm, whose size must be p.cp.size: what one process of
// `--comm mpi` computes. Every rank calls it with the same problem, inputs and options (the
// collectives would not match otherwise). The problem must be validated and laid out (L).
RankResult run_core_rank(const Problem& p, const StreamLayout& L, const Inputs& in, const RunOptions& opt,
                         HostComm& comm);

// Rank-by-rank execution over an in-process communicator (cp threads). Each rank sees only its
// own query rows and all-gathers the keys; key gradients are reduce-scattered. The per-rank
// results are mapped back to global rows, so the return value compares directly with run_core.
Result run_core_sharded(const Problem& p, const Inputs& in, const RunOptions& opt);

}  // namespace dsa
