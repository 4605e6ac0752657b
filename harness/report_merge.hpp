// dsa-parity merge: the reports of the shards of one run (fuzz --shard I/N, replay --shard I/N)
// into one report, as the unsharded run would have written it: every case record in case order,
// the counts, the buckets, the margin table, the coverage and the worst passing cases over all the
// shards, the timings summed. The report, JUnit and HTML are written by the run's own writers
// (harness/report.hpp) from the shards' records and tallies read back (harness/report_read.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsa {

struct MergeOptions {
  std::vector<std::string> inputs;     // the shards' reports
  std::string out, junit, html;        // -o (required), --junit, --html ("" = none)
  int64_t keep_worst = 10;             // full records of the worst passing cases kept (worst_passing)
  std::vector<std::string> arguments;  // the merge command line, for the merged context
};

// Writes the merged report (and JUnit, HTML) and prints its summary. Refuses, as InvalidInput
// naming the file and the rule, inputs that are not one run's shards: not a readable
// dsa-parity/report/v1 report (malformed JSON included), a report merged already, another
// command, seed, profile, backend, oracle, paths, git sha or shard count than the first input,
// a shard given twice, a case number in two shards. A partial set of shards is merged, and the run
// says which are missing (stdout, and context.merged). Returns the merged run's exit code: 130/143
// when a shard was interrupted, else 1 when a case failed, else 3 when a case could not run or was
// not run or a shard is missing, else 0.
int merge_reports(const MergeOptions& o);

}  // namespace dsa
