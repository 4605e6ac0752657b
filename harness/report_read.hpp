// Reports read back (dsa-parity merge, dsa-parity diff): a file checked to be a
// dsa-parity/report/v1 report, and its parts turned back into the writer's structures
// (harness/report.hpp), so that a merged report is counted, bucketed and written by the same code
// as any other run's.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "harness/report.hpp"

namespace dsa {

// The report in path: a regular file holding strict JSON (harness/strict_json.hpp) whose schema is
// kReportSchema, with a context, cases and a summary. Anything else is InvalidInput(field, ...):
// not a readable file, not valid JSON, not a dsa-parity report, another schema version
// (field + ": schema").
nlohmann::json read_report(const std::string& path, const std::string& field);

// A record of a report's cases or worst_passing back to a CaseRecord: a full record field for field
// (record_json(record_from_json(j)) == j); a compact one keeps only its tensors' margins, each
// check coming back with e_f = its margin over a unit floor, so margin_of gives the margin again.
// The JUnit name is the record's `name`, else derived from the case (random_case_name).
CaseRecord record_from_json(const nlohmann::json& record);
TensorCheck check_from_json(const nlohmann::json& check);

// The run context of a report (its context, and the summary's exit_code and maxfail_reached); the
// environment fields (git sha, host, GPU, ...) are kept as written, not this machine's.
RunContext context_from_json(const nlohmann::json& report);

// The tally of a report's summary: counts, buckets, margins and coverage (case_seconds, which the
// summary does not hold, is 0).
RunTally tally_from_json(const nlohmann::json& summary);

}  // namespace dsa
