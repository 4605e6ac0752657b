// The end of a run, shared by fuzz, replay and merge: what is printed about the run, then the
// report, JUnit and HTML finished, each path printed as it is written.
#pragma once

#include <string>

#include "harness/report.hpp"

namespace dsa {

// The summary table, the coverage line, the margins and the timing split (unless quiet), and the
// --oracle both agreement table (empty otherwise).
void print_run_summary(const RunContext& ctx, const RunTally& tally, bool quiet);

// Any writer may be absent (null, or an empty html path).
void finish_outputs(const RunContext& ctx, const RunTally& tally, ReportStream* report, JunitStream* junit,
                    const std::string& html);

}  // namespace dsa
