// One case through the house (DESIGN.md "Data flow"): prepare (once) → backend → the staged
// oracle and the comparison (check/judge.hpp) → a verdict with its bucket.
#pragma once

#include <string>
#include <vector>

#include "check/judge.hpp"
#include "harness/backend.hpp"
#include "harness/case.hpp"
#include "harness/prefetch.hpp"

namespace dsa {

// Validates the case, builds its layout and generates its inputs (and injected indices): once.
PreparedCase prepare_case(const Case& c);

// Runs case c on backend b and judges it with `oracle` (the CPU reference when null). The case must
// be valid (InvalidInput otherwise). Backend exceptions are verdicts (crash, timeout, cannot-run),
// never thrown. Only the case's stages among b.stages() are checked (the others are named in the
// message); none of them is cannot-run. repeat > 1 runs the backend that many times and holds the
// later runs against the first (check/repeats.hpp); backend_s is then the mean of the runs.
// With `prefetch`, the case's inputs come from it (prepared ahead when it was started on c) and
// generate_s is the time the case waited for them.
CaseVerdict run_case(const Case& c, Backend& b, Oracle* oracle = nullptr, int repeat = 1,
                     CasePrefetch* prefetch = nullptr);

}  // namespace dsa
