#include "core/mutant.hpp"

#include "core/errors.hpp"

namespace dsa {

const std::vector<MutantInfo>& all_mutants() {
  static const std::vector<MutantInfo> mutants = {
      {Mutant::causal_end_off_by_one, "causal_end_off_by_one", "a row also sees the key right after it (visible end g+2)"},
      {Mutant::zigzag_chunk_swap, "zigzag_chunk_swap", "a zigzag rank stores its two chunks per sequence in swapped order"},
      {Mutant::contiguous_read_as_zigzag, "contiguous_read_as_zigzag", "keys sharded contiguously are restored to global order as if zigzag"},
      {Mutant::pad_keys_visible, "pad_keys_visible", "the previous sequence's pad keys are visible to a sequence's rows"},
      {Mutant::neg1_read_as_row0, "neg1_read_as_row0", "a -1 top-k slot reads key row 0 without a visibility check"},
      {Mutant::trust_noncausal_indices, "trust_noncausal_indices", "the attention trusts in-range indices without a causality check"},
      {Mutant::base2_lse_backward, "base2_lse_backward", "the backward recomputes P from a base-2 lse"},
      {Mutant::no_key_grad_reduce_scatter, "no_key_grad_reduce_scatter", "key gradients are not reduce-scattered: a rank keeps only its own partial"},
      {Mutant::dq_missing_scale, "dq_missing_scale", "dQ~ is missing the softmax scale"},
      {Mutant::dlogit_missing_delta, "dlogit_missing_delta", "dlogit = P*dP: the Delta term is dropped"},
      {Mutant::kl_reversed, "kl_reversed", "the loss computes KL(Q||T) instead of KL(T||Q)"},
      {Mutant::loss_per_rank_mean, "loss_per_rank_mean", "the loss is normalized by each rank's counted rows times cp"},
      {Mutant::relu_grad_one_at_zero, "relu_grad_one_at_zero", "the ReLU derivative is 1 at u = 0"},
      {Mutant::streaming_kl_drop_last_chunk, "streaming_kl_drop_last_chunk", "the streaming sparse KL skips its last chunk of rows"},
      {Mutant::topk_lowest_on_ties, "topk_lowest_on_ties", "a tied boundary slot takes the best key strictly below the tie"},
      {Mutant::allgather_rank_order_scrambled, "allgather_rank_order_scrambled",
       "the all-gathered key blocks are restored in the wrong rank order (rank r's block read as rank r+1's)"},
      {Mutant::zigzag_send_halves_swapped, "zigzag_send_halves_swapped",
       "a zigzag rank sends its key rows to the all-gather with its two chunks per sequence swapped (its query rows stay right)"},
      {Mutant::loss_count_rank_left_out, "loss_count_rank_left_out",
       "the last CP rank's counted rows are left out of the loss's global N (cp > 1)"},
  };
  return mutants;
}

Mutant parse_mutant(const std::string& n) {
  for (auto& p : all_mutants())
    if (n == p.name) return p.mutant;
  throw InvalidInput("backend", "unknown mutant '" + n + "' (see dsa-parity mutants)");
}

const char* name(Mutant p) {
  if (p == Mutant::none) return "none";
  for (auto& i : all_mutants())
    if (i.mutant == p) return i.name;
  return "?";
}

}  // namespace dsa
