// One case through the house (DESIGN.md "Data flow"): prepare (once) → backend → the staged
// oracle and the comparison (check/judge.hpp) → a verdict with its bucket.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "check/judge.hpp"
#include "harness/backend.hpp"
#include "harness/case.hpp"
#include "harness/prefetch.hpp"

namespace dsa {

// Validates the case, builds its layout and generates its inputs (and injected indices): once.
PreparedCase prepare_case(const Case& c);

// The case as backend b runs it: only its stages among b.stages() (the others appended to
// *skipped, comma-separated); nullopt when b implements none of them.
std::optional<Case> backend_case(const Case& asked, const Backend& b, std::string* skipped = nullptr);

// Runs case c on backend b and judges it with `oracle` (the CPU reference when null). The case must
// be valid (InvalidInput otherwise). Backend exceptions are verdicts (crash, timeout, cannot-run),
// never thrown. Only the case's stages among b.stages() are checked (the others are named in the
// message); none of them is cannot-run. repeat > 1 runs the backend that many times and holds the
// later runs against the first (check/repeats.hpp); backend_s is then the mean of the runs.
// With `prefetch`, the case's inputs come from it (prepared ahead when it was started on c) and
// generate_s is the time the case waited for them; so does its backend run when the prefetch ran
// it ahead (CasePrefetch::run_backends_ahead), and once this case's backend run is done (repeat 1)
// the prefetch may start the next one's, beside this case's judge.
CaseVerdict run_case(const Case& c, Backend& b, Oracle* oracle = nullptr, int repeat = 1,
                     CasePrefetch* prefetch = nullptr);

}  // namespace dsa
