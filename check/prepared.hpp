// A prepared case: the validated problem, its layout and its inputs, built once and then read by
// the backend, every oracle stage and the comparison (DESIGN.md "Data flow").
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/catalogue.hpp"
#include "core/inputs.hpp"
#include "core/layout.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"

namespace dsa {

struct PreparedCase {
  Problem problem;
  StreamLayout layout;
  Inputs inputs;
  std::optional<TensorI> injected;  // indices given to the attention instead of the top-k
  std::vector<Stage> stages;        // the stages whose tensors are checked
  int64_t width = 0;                // K' = min(K, Tp)
  uint64_t id = 0;                  // unique to this prepare() in the process: copies and moves keep it

  bool checks(Stage s) const;
};

// Validates the problem (InvalidInput naming the field), builds its layout and checks the input
// and injected shapes against the catalogue: the only place a case is validated and laid out.
PreparedCase prepare(Problem p, Inputs in, std::optional<TensorI> injected, std::vector<Stage> stages);

}  // namespace dsa
