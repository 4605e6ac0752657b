// Determinism, checked (`--repeat N`, what cuDNN's DSA tests do with 1000 repeats): the backend runs
// N times on the same case; the first run is judged (check/judge.hpp) and every later run is held
// against it, tensor by tensor. A tensor the backend declares deterministic must come back with the
// same bits; any other one must stay within its tolerance of the first run (spread ≤ α·e_l + floor),
// so that whichever run a user gets, it would have passed alike. Either breach is failure class
// `nondeterministic`.
//
// Another selection: SPEC.md §4 lets boundary ties and slot order come out either way, so a backend
// that does not claim the top-k's bits may pick other keys in a later run. Everything after the
// indexer is then computed on other keys, and holding it to the first run means nothing: that run
// is judged in full on its own (judge, one more oracle run) and its tensors downstream of the
// selection are not held against the first run; the scores and the top-k's own record still are.
#pragma once

#include <string>
#include <vector>

#include "check/judge.hpp"
#include "core/result.hpp"

namespace dsa {

// Whether run `again` selected otherwise than `first` (a top-k of the same shape differing in some
// bit) where the backend does not declare the top-k deterministic: then judge `again` on its own.
bool selection_changed(const Result& first, const Result& again, const std::vector<std::string>& deterministic);

// Holds run `again` (the k-th, k ≥ 2) against `first` for every compared tensor of v.checks and
// updates the checks and, when one fails, the verdict (the first failing check in stage order stays
// the primary failure). `deterministic`: the result tensors the backend declares bitwise reproducible.
//
// `own`: run `again`'s own judgment when its selection changed (else nullptr). Its failing checks
// fail v's matching ones, their detail led by "run k (another selection): "; a run it could not
// judge (cannot-run, not-run) leaves a passing case at that verdict, never a pass. Unless
// `selection_feeds_attention` is false (the case injects the attention's indices), the tensors after
// the indexer are then not held against `first`; their `repeat` counts the run all the same.
void check_repeat(CaseVerdict& v, const Result& first, const Result& again, const std::vector<std::string>& deterministic,
                  const CaseVerdict* own = nullptr, bool selection_feeds_attention = true);

}  // namespace dsa
