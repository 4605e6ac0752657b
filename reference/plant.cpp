#include "reference/plant.hpp"

#include "reference/errors.hpp"

namespace dsa {

const std::vector<PlantInfo>& all_plants() {
  static const std::vector<PlantInfo> plants = {
      {Plant::causal_end_off_by_one, "causal_end_off_by_one", "a row also sees the key right after it (visible end g+2)"},
      {Plant::zigzag_chunk_swap, "zigzag_chunk_swap", "a zigzag rank stores its two chunks per sequence in swapped order"},
      {Plant::contiguous_read_as_zigzag, "contiguous_read_as_zigzag", "keys sharded contiguously are restored to global order as if zigzag"},
      {Plant::pad_keys_visible, "pad_keys_visible", "the previous sequence's pad keys are visible to a sequence's rows"},
      {Plant::neg1_read_as_row0, "neg1_read_as_row0", "a -1 top-k slot reads key row 0 without a visibility check"},
      {Plant::trust_noncausal_indices, "trust_noncausal_indices", "the attention trusts in-range indices without a causality check"},
      {Plant::base2_lse_backward, "base2_lse_backward", "the backward recomputes P from a base-2 lse"},
      {Plant::no_key_grad_reduce_scatter, "no_key_grad_reduce_scatter", "key gradients are not reduce-scattered: a rank keeps only its own partial"},
      {Plant::dq_missing_scale, "dq_missing_scale", "dQ~ is missing the softmax scale"},
      {Plant::dlogit_missing_delta, "dlogit_missing_delta", "dlogit = P*dP: the Delta term is dropped"},
      {Plant::kl_reversed, "kl_reversed", "the loss computes KL(Q||T) instead of KL(T||Q)"},
      {Plant::loss_per_rank_mean, "loss_per_rank_mean", "the loss is normalized by each rank's counted rows times cp"},
      {Plant::relu_grad_one_at_zero, "relu_grad_one_at_zero", "the ReLU derivative is 1 at u = 0"},
      {Plant::streaming_kl_drop_last_chunk, "streaming_kl_drop_last_chunk", "the streaming sparse KL skips its last chunk of rows"},
      {Plant::topk_lowest_on_ties, "topk_lowest_on_ties", "a tied boundary slot takes the best key strictly below the tie"},
  };
  return plants;
}

Plant parse_plant(const std::string& n) {
  for (auto& p : all_plants())
    if (n == p.name) return p.plant;
  throw InvalidInput("backend", "unknown mutant '" + n + "' (see dsa-parity mutants)");
}

const char* name(Plant p) {
  if (p == Plant::none) return "none";
  for (auto& i : all_plants())
    if (i.plant == p) return i.name;
  return "?";
}

}  // namespace dsa
