// Every stage's output of one run (DESIGN.md "Result"), rows in global stream order.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "reference/tensor.hpp"

namespace dsa {

struct Result {
  std::optional<TensorD> scores;  // [Tp, Tp] indexer scores, −inf where not visible (small cases only)
  TensorI topk;                   // [Tp, K'] indexer top-k, −1 for empty slots
  TensorD O;                      // [Tp, H, Dv]
  TensorD O_lat;                  // [Tp, H, C]
  TensorD lse;                    // [Tp, H] natural log; −inf for empty rows
  TensorD kl;                     // [Tp] per-row KL (0 when the loss is off or the row is not counted)
  TensorD loss;                   // [1]
  TensorD dq_nope, dq_pe, dW_UK, dW_UV, dc, dk_pe;  // attention backward (SPEC.md §6)
  TensorD dq_I, dk_I, dw;                           // indexer loss backward (SPEC.md §7)

  // The float-valued outputs by name, in a fixed order; empty tensors were not produced.
  void for_each_float(const std::function<void(const std::string&, const TensorD&)>& f) const;
  void for_each_float(const std::function<void(const std::string&, TensorD&)>& f);
};

}  // namespace dsa
