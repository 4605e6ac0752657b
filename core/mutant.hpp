// Planted bugs ("mutants", DESIGN.md): each one realistic bug from SPEC.md §10, switched on in the
// low-precision reference so that the harness can prove it catches it. Mutant::none is the real code.
#pragma once

#include <string>
#include <vector>

namespace dsa {

enum class Mutant {
  none,
  causal_end_off_by_one,        // a row also sees the key right after it
  zigzag_chunk_swap,            // a zigzag rank lays out its two chunks in swapped order
  contiguous_read_as_zigzag,    // keys sharded contiguously, gathered back as if zigzag
  pad_keys_visible,             // the previous sequence's pad keys are visible
  neg1_read_as_row0,            // a −1 top-k slot reads key row 0 without a visibility check
  trust_noncausal_indices,      // the attention trusts the indexer for causality
  base2_lse_backward,           // the backward recomputes P with a base-2 lse
  no_key_grad_reduce_scatter,   // a rank keeps only its own partial key gradients
  dq_missing_scale,             // dQ~ lacks the softmax scale
  dlogit_missing_delta,         // dlogit = P·dP, the Δ term dropped
  kl_reversed,                  // KL(Q‖T) instead of KL(T‖Q)
  loss_per_rank_mean,           // loss normalized by per-rank counted rows × cp
  relu_grad_one_at_zero,        // φ'(0) = 1 for ReLU
  streaming_kl_drop_last_chunk, // the streaming KL skips its last row chunk
  topk_lowest_on_ties,          // a tied boundary slot takes the best key strictly below it
  // The exchange between CP ranks (they act the same on threads and on MPI processes):
  allgather_rank_order_scrambled,  // the all-gathered key blocks are read in the wrong rank order
  zigzag_send_halves_swapped,      // a zigzag rank sends its key rows with its two chunks swapped
  loss_count_rank_left_out,        // the last rank's counted rows are left out of the loss's N
};

struct MutantInfo {
  Mutant mutant;
  const char* name;
  const char* breaks;  // one line: what goes wrong
};

const std::vector<MutantInfo>& all_mutants();
// Throws InvalidInput("backend", ...) for an unknown name.
Mutant parse_mutant(const std::string& name);
const char* name(Mutant p);

}  // namespace dsa
