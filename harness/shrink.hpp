// Shrinking (DESIGN.md "Data flow"): reduce a failing case while its failure holds, greedily, one
// simplification at a time, bounded in backend runs and time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/backend.hpp"
#include "harness/case.hpp"
#include "harness/run_case.hpp"

namespace dsa {

struct ShrinkOptions {
  double time_budget_s = 60;
  int64_t max_runs = 400;
};

struct ShrinkResult {
  Case shrunk;
  CaseVerdict verdict;  // the shrunk case's verdict: it still has the original failure
  int64_t runs = 0, accepted = 0;
  double seconds = 0;
};

// What must keep failing: the (stage, tensor, class) of the bucket. The feature tags are recomputed
// on the shrunk case (dropping cp or ties is a simplification, not a different bug).
struct FailureKey {
  std::optional<Stage> stage;  // empty: a failure of the run itself (crash, timeout)
  std::string tensor;
  Failure failure = Failure::none;
};

// Simplifications of c, biggest first: only the failing stage checked, fewer sequences, smaller cp,
// shorter sequences, fewer heads, smaller dims and K, adversarial features off, loss and path and
// pad policy back to their simplest. Each is a valid case and strictly smaller by case_weight, or
// equal in weight but with fewer features.
std::vector<Case> shrink_candidates(const Case& c, std::optional<Stage> failing_stage);

// A size measure: padded rows times the per-row work of the dims, plus K.
int64_t case_weight(const Case& c);

// v must be a failing verdict of c on b. Returns the smallest case found whose verdict on b still
// has the failure (c itself when nothing smaller does).
ShrinkResult shrink_case(const Case& c, const CaseVerdict& v, Backend& b, const ShrinkOptions& opt = {});

}  // namespace dsa
