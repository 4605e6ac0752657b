// Reports of a run (DESIGN.md): the `dsa-parity/report/v1` JSON (schema in
// reports/schema/report.schema.json), JUnit XML, the terminal summary table by bucket, the
// one-line repro command of every failure, and progress with rate and ETA on a TTY.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/case.hpp"
#include "harness/run_case.hpp"

namespace dsa {

inline constexpr const char* kReportSchema = "dsa-parity/report/v1";

struct ShrinkRecord {
  Case shrunk;
  std::string bucket;   // the bucket of the shrunk case (its feature tags may differ)
  std::string file;     // where the shrunk case was written
  int64_t runs = 0;     // backend runs spent
  double seconds = 0;
  int64_t tp = 0;       // padded rows of the shrunk case
};

struct CaseRecord {
  int64_t index = 0;
  std::string origin;     // the corpus file it came from, or "random"
  Case c;
  CaseVerdict v;
  std::string case_file;  // a file holding the case (the corpus file, or one written for the failure)
  std::string repro;      // the one-line repro command, for every failure
  std::optional<ShrinkRecord> shrunk;
};

struct RunContext {
  std::string command;                // fuzz | repro | replay | shrink
  std::vector<std::string> arguments; // the command line after the binary
  std::string backend, profile;
  std::string oracle = "cpu";         // the oracle that computed the exact and lowp sides
  uint64_t master_seed = 0;
  std::vector<Path> paths;            // the MLA paths random cases were drawn from; empty: none drawn
  std::vector<std::string> not_selected;  // fuzz: corpus files of other paths, not run
  std::string started;                // UTC, ISO 8601
  double seconds = 0;
  int exit_code = 0;
};

// The run context fields that describe the environment: git sha, host, GPU, CUDA/NCCL.
nlohmann::json environment_json();
std::string utc_now();

nlohmann::json check_json(const TensorCheck& t);
nlohmann::json record_json(const CaseRecord& r);
nlohmann::json report_json(const RunContext& ctx, const std::vector<CaseRecord>& records);
std::string junit_xml(const RunContext& ctx, const std::vector<CaseRecord>& records);

// Summary by bucket, most frequent first, then the counts.
std::string summary_table(const std::vector<CaseRecord>& records, double seconds);
// Per-tensor metrics of one case (what `repro` prints).
std::string checks_table(const CaseVerdict& v);

// `dsa-parity repro FILE --backend B`, quoted for a POSIX shell.
std::string repro_command(const std::string& case_file, const std::string& backend);
std::string shell_quote(const std::string& s);

void write_text_file(const std::string& path, const std::string& text);  // creates parent folders

// Progress on stderr when it is a TTY: cases done, failures, rate and ETA (from the case count or
// the time budget, whichever is given).
class Progress {
 public:
  Progress(bool enabled, std::optional<int64_t> total, std::optional<double> budget_s);
  void update(int64_t done, int64_t failures);
  void finish();

 private:
  bool enabled_;
  std::optional<int64_t> total_;
  std::optional<double> budget_;
  std::chrono::steady_clock::time_point start_;
  bool drawn_ = false;
  double last_ = 0;
};

}  // namespace dsa
