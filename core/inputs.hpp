// The tensors of one problem (SPEC.md §0), in global stream order. Every value is a bf16 value
// held in double: all backends, the exact one included, consume the same bf16 numbers.
#pragma once

#include <functional>
#include <string>

#include "core/problem.hpp"
#include "core/tensor.hpp"

namespace dsa {

struct Inputs {
  TensorD q_nope;  // [Tp, H, Dn]
  TensorD q_pe;    // [Tp, H, R]
  TensorD c;       // [Tp, C]
  TensorD k_pe;    // [Tp, R]
  TensorD W_UK;    // [H, Dn, C]
  TensorD W_UV;    // [H, Dv, C]
  TensorD q_I;     // [Tp, HI, DI]
  TensorD k_I;     // [Tp, DI]
  TensorD w;       // [Tp, HI]
  TensorD dO;      // [Tp, H, Dv]

  // Visits every tensor with its SPEC.md name, in the order of the table above.
  void for_each(const std::function<void(const std::string&, TensorD&)>& f);
  void for_each(const std::function<void(const std::string&, const TensorD&)>& f) const;
};

// The shape every input must have for problem p with a padded stream of tp rows.
Shape input_shape(const std::string& name, const Dims& d, int64_t tp);

// Zero tensors of the right shapes.
Inputs zero_inputs(const Dims& d, int64_t tp);

// Throws InvalidInput if any tensor has the wrong shape.
void check_shapes(const Inputs& in, const Dims& d, int64_t tp);

}  // namespace dsa
