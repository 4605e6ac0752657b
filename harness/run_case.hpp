// One case through a backend and the two oracles (SPEC.md §9): the backend's run, the exact and
// the low-precision reference with the same attention indices, the top-k equivalence test and the
// comparison of every tensor of every stage the case checks.
#pragma once

#include <string>
#include <vector>

#include "harness/backend.hpp"
#include "harness/case.hpp"
#include "harness/compare.hpp"

namespace dsa {

struct CaseVerdict {
  // pass: every checked tensor within tolerance (some may be not-checked);
  // fail: a parity failure (mismatch, nan, inf-pattern, topk-not-equivalent) or a crash/timeout;
  // not-run: the backend produced none of the checked tensors;
  // cannot-run: the environment or the backend cannot run this case (never a pass).
  std::string verdict = "pass";
  std::string stage, tensor, failure;  // the primary failure: the first failing check in stage order
  std::string bucket;                  // empty unless verdict == fail
  std::string message;                 // one line
  std::vector<TensorCheck> checks;     // every tensor of the checked stages
  double backend_s = 0, oracle_s = 0, compare_s = 0;

  bool failed() const { return verdict == "fail"; }
  // Whether some check (or the crash) has this (stage, tensor, class): shrink's invariant.
  bool has_failure(const std::string& stage, const std::string& tensor, const std::string& cls) const;
};

// Runs case c on backend b. The case must be valid (InvalidInput otherwise). Backend exceptions are
// verdicts (crash, timeout, cannot-run), never thrown.
CaseVerdict run_case(const Case& c, Backend& b);

// The exact indexer scores of row g's visible keys, computed directly (SPEC.md §3), for cases too
// large for the reference to return the [Tp, Tp] score matrix.
ScoreRow exact_score_row(const Problem& p, const Inputs& in, const StreamLayout& L, int64_t g);

}  // namespace dsa
