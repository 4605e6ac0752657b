// Determinism, checked (`--repeat N`, what cuDNN's DSA tests do with 1000 repeats): the backend runs
// N times on the same case; the first run is judged (check/judge.hpp) and every later run is held
// against it, tensor by tensor. A tensor the backend declares deterministic must come back with the
// same bits; any other one must stay within its tolerance of the first run (spread ≤ α·e_l + floor),
// so that whichever run a user gets, it would have passed alike. Either breach is failure class
// `nondeterministic`.
#pragma once

#include <string>
#include <vector>

#include "check/judge.hpp"
#include "core/result.hpp"

namespace dsa {

// Holds run `again` (the k-th, k ≥ 2) against `first` for every compared tensor of v.checks and
// updates the checks and, when one fails, the verdict (the first failing check in stage order stays
// the primary failure). `deterministic`: the result tensors the backend declares bitwise reproducible.
void check_repeat(CaseVerdict& v, const Result& first, const Result& again, const std::vector<std::string>& deterministic);

}  // namespace dsa
