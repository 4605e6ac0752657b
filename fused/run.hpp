// The fused DSA core on the GPU, end to end (DESIGN.md "Fused kernels and communication"): one host
// thread per CP rank, each with its local query rows and its own key rows; keys all-gathered,
// key gradients reduce-scattered, weight gradients and the loss all-reduced. The result is
// assembled in global row order so that it compares directly with reference run_core.
#pragma once

#include <optional>
#include <string>

#include "core/inputs.hpp"
#include "core/layout.hpp"
#include "core/problem.hpp"
#include "core/rank_shard.hpp"
#include "core/result.hpp"
#include "fused/comm/comm.hpp"

namespace dsa::fused {

enum class CommKind { auto_, nccl, local };
// "auto" | "nccl" | "local"; anything else is InvalidInput(field, ...).
CommKind parse_comm(const std::string& s, const std::string& field = "--comm");
const char* name(CommKind k);

struct FusedOptions {
  CommKind comm = CommKind::auto_;
  // [Tp, K'] global rows the attention and the loss use instead of the indexer's top-k (the
  // indexer's own top-k is still computed and returned).
  std::optional<TensorI> attention_indices;
  bool want_scores = true;                 // return the [Tp, Tp] scores when Tp² ≤ max_score_elements
  int64_t max_score_elements = 1 << 22;
};

// auto: NCCL when built with it and every rank has its own GPU, else the local communicator.
CommKind resolve_comm(CommKind k, int64_t cp);

// Throws dsa::Unavailable for a problem the fused path does not implement (path = explicit) or
// without a device; std::runtime_error when a CUDA call fails.
// run_fused's ranks run their shards (shard_inputs of their rows) through this one function too.
Result run_fused(const Problem& p, const Inputs& in, const FusedOptions& opt = {});

// One CP rank of run_fused on a communicator made by the caller (`--comm mpi`: one process per
// rank, NCCL bootstrapped over MPI): rank comm.rank() of p (validated, laid out as L, comm.size()
// = the case's cp) on its shard `local` (shard_inputs(inputs, L.rank_rows[rank]); the weights
// whole). opt.attention_indices, when given, are global [Tp, K'] rows. Returns its RankResult, the
// local rows in the rank's order: assemble_ranks of every rank's gives run_fused's Result.
// opt.comm is not used. Throws as run_fused does.
RankResult run_fused_rank(const Problem& p, const StreamLayout& L, const Inputs& local, const FusedOptions& opt,
                          DeviceComm& comm);

}  // namespace dsa::fused
