// Reports of a run (DESIGN.md): the `dsa-parity/report/v1` JSON (schema in
// reports/schema/report.schema.json), JUnit XML, the terminal summary table by bucket, the
// one-line repro command of every failure, and progress with rate and ETA on a TTY.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/case.hpp"
#include "harness/coverage.hpp"
#include "harness/run_case.hpp"
#include "harness/shard.hpp"

namespace dsa {

inline constexpr const char* kReportSchema = "dsa-parity/report/v1";

struct ShrinkRecord {
  Case shrunk;
  std::string bucket;   // the bucket of the shrunk case (its feature tags may differ)
  std::string file;     // where the shrunk case was written (in reports: relative to the report's folder)
  std::string file_here;  // the same, as a path that works from here (absolute): terminal lines
  int64_t runs = 0;     // backend runs spent
  double seconds = 0;
  int64_t tp = 0;       // padded rows of the shrunk case
};

struct CaseRecord {
  int64_t index = 0;
  std::string origin;     // the corpus file it came from, or "random" (reports: relative to the report's folder)
  std::string name;       // stable JUnit name: the corpus file's relative path, or "dsa(...) #<hash of the case>"
  Case c;
  CaseVerdict v;
  std::string case_file;  // a file holding the case (the corpus file, or one written for the failure);
                          // in reports relative to the report's folder
  std::string repro;      // the one-line repro command of every failure, as stored in the report (case
                          // path relative to the report's folder, binary `dsa-parity`)
  std::string repro_here; // the same line as it runs here: the binary as invoked, the case path
                          // absolute (terminal, JUnit); "" = repro
  std::optional<ShrinkRecord> shrunk;
  bool unfinished = false;  // stopped at the session's hard time limit (verdict not-run)
};

struct RunContext {
  std::string command;                // fuzz | repro | replay | shrink
  std::vector<std::string> arguments; // the command line after the binary
  std::string backend, profile;
  std::string oracle = "cpu";         // the oracle that computed the exact and lowp sides
  uint64_t master_seed = 0;           // written as a string (JSON numbers lose bits above 2^53)
  std::vector<Path> paths;            // the MLA paths random cases were drawn from; empty: none drawn
  std::vector<std::string> not_selected;  // fuzz: corpus files of other paths, not run
  std::string started;                // UTC, ISO 8601
  double seconds = 0;
  int exit_code = 0;
  bool interrupted = false;           // stopped by SIGINT/SIGTERM: the report holds the cases done
  int64_t maxfail = 0;                // --maxfail N (0 = none)
  bool maxfail_reached = false;       // the run stopped after --maxfail failing cases
  int64_t keep_worst = 10;            // full records kept for the worst passing cases by margin
  int repeat = 1;                     // --repeat N: backend runs per case
  // The backend ran each next case while the case before it was judged (harness/prefetch.hpp): a
  // case's timing parts then overlap other cases' and their sum exceeds the run's time.
  bool backend_ahead = false;
  Shard shard;                        // --shard I/N (written as context.shard when N > 1)
  // The context fields of the machine the cases ran on (environment_json()); null: this process's,
  // captured when the context is written. A merged report keeps its shards'.
  nlohmann::json environment;
  nlohmann::json merged;              // dsa-parity merge: the shard reports it came from (null: none)
  std::string comm = "auto";          // --comm: auto | local | nccl | mpi
  int world_size = 1;                 // processes of the run (--comm mpi: one per CP rank)
  std::vector<std::string> rank_devices;  // --backend cuda --comm mpi: the GPU of each rank (empty: not written)
  std::optional<RankFailure> rank_failure;  // the rank whose failure ended the session, and how
};

// The worst margin e_f / (alpha * e_l + floor) of a checked tensor (<= 1 passes a mismatch check);
// +inf when the denominator is 0 and e_f > 0.
double margin_of(const TensorCheck& t);
// The largest margin of a case's checked tensors (-1 when none was compared).
double record_margin(const CaseVerdict& v);
// "g=12 head=3 dim=7" (the worst element), "" when not located.
std::string where_of(const TensorCheck& t);

// Stable JUnit names and classnames (harness/report.cpp).
std::string random_case_name(const Case& c);       // describe(c) + " #" + 8 hex of the case JSON's hash
std::string backend_kind(const std::string& backend);  // "exec:python3 k.py" -> "exec"

// What repro lines carry besides the case file: the binary as invoked, the options that change the
// verdict, the DSA_* environment (README "Runs, reports, repro lines").
struct ReproSpec {
  std::string binary = "dsa-parity";                       // argv[0], absolute when it holds a '/'
  std::vector<std::string> options;                        // "--backend", "lowp", "--oracle", "gpu", ...
  std::vector<std::pair<std::string, std::string>> env;    // DSA_* variables set here
  std::string launcher;                                    // before the binary: "mpirun -np 2" under --comm mpi
};
// "VAR=value ... [LAUNCHER] BINARY repro CASE OPTIONS", quoted for a POSIX shell.
std::string repro_line(const ReproSpec& s, const std::string& case_file);
// The DSA_* variables of the environment that matter to a case (all but DSA_GIT_SHA), sorted.
std::vector<std::pair<std::string, std::string>> repro_environment();
// argv[0] of the process (main sets it): made absolute when it holds a '/'.
void set_invoked_binary(const std::string& argv0);
const std::string& invoked_binary();
// path relative to folder ("" folder: path as is); generic separators.
std::string relative_to(const std::string& path, const std::string& folder);
// A corpus path as a report in report_folder holds it: relative to that folder, except where that
// relative path would climb to the filesystem root and so spell out the machine's directories (a
// report in /tmp, the corpus under /home/alice): a file under corpus_root is then
// "corpus <path relative to corpus_root>" (README "Portable reports"), which merging leaves as it is.
std::string report_path(const std::string& path, const std::string& report_folder, const std::string& corpus_root);
// The "corpus ..." form of report_path.
bool is_corpus_relative(const std::string& path);

// What the summary, the bucket table and JUnit's counts need, without the cases themselves: a
// long run keeps counts and one row per bucket in memory, never its case records.
struct RunTally {
  struct Bucket {
    std::string bucket, repro, stage, tensor, failure_class, shrunk_file;
    std::string repro_here, shrunk_here;    // the terminal's forms (see CaseRecord)
    int64_t count = 0, first_case = 0;
    std::map<std::string, int64_t> tags;    // feature tag -> cases of the bucket with it ("plain": none)
  };
  // The worst margin of each checked tensor over the run, and where.
  struct Margin {
    std::string stage, tensor, description, where;
    double worst = -1;
    int64_t case_index = -1;
  };
  int64_t cases = 0, passed = 0, failed = 0, not_run = 0, cannot_run = 0;
  int64_t unfinished = 0;           // stopped at the hard time limit (counted in not_run)
  int64_t not_checked_tensors = 0;  // tensors of the checked stages that were not compared
  int64_t not_checked_cases = 0;    // cases with at least one of them
  double case_seconds = 0;          // generate + backend + oracle + compare, over every case
  double generate_s = 0, backend_s = 0, oracle_s = 0, compare_s = 0;  // the same, split
  // --oracle both: the second oracle's worst agreement per tensor, and the cases where it disagreed.
  std::vector<OracleAgreement> oracle_agreement;
  int64_t oracle_disagreements = 0, first_disagreement = -1;
  std::vector<Bucket> buckets;      // in order of first appearance
  Coverage coverage;                // what the cases reach (harness/coverage.hpp)
  std::vector<Margin> margins;      // in order of first appearance (few tensors: linear)

  void add(const CaseRecord& r);
  static RunTally of(const std::vector<CaseRecord>& records);
  // Adds the tally of other cases (another shard of the run, dsa-parity merge): counts and coverage
  // summed, buckets re-keyed by their bucket string (counts and tags summed, the first case the
  // lowest, kept in order of first case), each tensor's worst margin the worst of both (the lower
  // case on a tie), as one tally over all the cases would have them.
  void merge(const RunTally& other);
  void add_bucket(const Bucket& b);  // one bucket row of other cases, merged as merge() does
  void add_margin(const Margin& m);  // one tensor's worst margin over other cases, likewise

 private:
  Margin& margin_row(const std::string& stage, const std::string& tensor);  // found or appended
  Bucket& bucket_row(const std::string& bucket, bool& added);                // found or appended (added)
  std::vector<std::pair<std::string, size_t>> index_;  // bucket -> position (few buckets: linear)
};

// The run context fields that describe the environment: git sha, host, GPU, CUDA/NCCL.
nlohmann::json environment_json();
std::string utc_now();

nlohmann::json check_json(const TensorCheck& t);
nlohmann::json agreement_json(const std::vector<OracleAgreement>& rows);
nlohmann::json record_json(const CaseRecord& r);
// The compact record of a passing case (<= 1 KB): index, origin, description, verdict, the case
// without its note, timings and each tensor's margin.
nlohmann::json compact_record_json(const CaseRecord& r);
// The record a report's "cases" holds: compact for a passing case, full otherwise.
nlohmann::json report_record_json(const CaseRecord& r);
nlohmann::json context_json(const RunContext& ctx);
nlohmann::json summary_json(const RunContext& ctx, const RunTally& t);
// The whole report / JUnit of records at once (what the streams below write case by case).
nlohmann::json report_json(const RunContext& ctx, const std::vector<CaseRecord>& records);
std::string junit_xml(const RunContext& ctx, const std::vector<CaseRecord>& records);
std::string junit_case_xml(const RunContext& ctx, const CaseRecord& r);

// Summary by bucket, most frequent first, then the counts; the tensors not checked, and whether
// the run was interrupted, when so.
std::string summary_table(const RunTally& t, double seconds, bool interrupted = false);
std::string summary_table(const std::vector<CaseRecord>& records, double seconds);
// The per-tensor margin table printed at the end of a run.
std::string margin_table(const RunTally& t);
// --oracle both: the per-tensor agreement table of the second oracle with the authority.
std::string agreement_table(const RunTally& t);
// Where a run's case time went: generate / backend / oracle / compare, in seconds and shares.
// overlapped_wall_s: the run's wall time, given when cases overlapped (RunContext::backend_ahead).
std::string timing_line(const RunTally& t, std::optional<double> overlapped_wall_s = std::nullopt);
// A static, self-contained XHTML page: the margins as inline SVG bars and the bucket table.
std::string html_summary(const RunContext& ctx, const RunTally& t);

// The worst N passing cases by margin, kept as their full records in a bounded heap (streaming:
// memory is N records, whatever the run's length).
class WorstPassing {
 public:
  explicit WorstPassing(int64_t n) : n_(n) {}
  void add(const CaseRecord& r);
  // A passing case's full record as a report holds it (merge: the shards' worst_passing).
  void add(double margin, int64_t index, const nlohmann::json& full_record);
  nlohmann::json sorted() const;  // worst first; equal margins by case index
 private:
  bool kept(double margin, int64_t index) const;  // whether a case of this margin would be kept now
  struct Entry {
    double margin;
    int64_t index;
    std::string record;  // the full record, dumped
  };
  int64_t n_;
  std::vector<Entry> heap_;  // the least bad on top: the next to go
};

// Refuses a --report / --junit path (InvalidInput naming flag) that is a directory or cannot be
// written, before any case runs; creates its parent folders.
void check_output_file(const std::string& path, const std::string& flag);

// A file written as cases finish: to "<path>.partial-<pid>" beside path, renamed onto path by
// finish(). Until then the partial file holds every case done so far; destroyed unfinished (an
// error ended the run), the partial file is removed.
class StreamedFile {
 public:
  StreamedFile(const std::string& path, const std::string& flag);  // InvalidInput(flag, ...) when it cannot
  ~StreamedFile();
  StreamedFile(const StreamedFile&) = delete;
  StreamedFile& operator=(const StreamedFile&) = delete;
  int64_t offset() const { return offset_; }
  void write(const std::string& text);           // appends and flushes to the file
  void patch(int64_t at, const std::string& text);  // overwrites bytes written earlier
  void finish();                                 // renames into place
  const std::string& path() const { return path_; }

 private:
  std::string path_, partial_, flag_;
  std::FILE* f_ = nullptr;
  int64_t offset_ = 0;
};

// The JSON report, streamed: the schema and the context first, then each case record as it
// finishes, then the summary. The context's end-of-run fields (seconds, interrupted) are written
// as padded placeholders and patched in place by finish(): the finished file has the structure
// of report_json's.
class ReportStream {
 public:
  ReportStream(const std::string& path, const RunContext& ctx, bool indent);
  void add(const CaseRecord& r);  // its record in "cases", and a candidate for "worst_passing"
  // dsa-parity merge: a record as a report holds it, copied into "cases"; and a full record of a
  // passing case offered for "worst_passing".
  void add_record(const nlohmann::json& record);
  void offer_worst(double margin, int64_t index, const nlohmann::json& full_record);
  void finish(const RunContext& ctx, const RunTally& t);
  const std::string& path() const { return file_.path(); }

 private:
  StreamedFile file_;
  int indent_;
  int64_t seconds_at_ = -1, interrupted_at_ = -1;
  bool first_ = true;
  WorstPassing worst_;
};

// JUnit XML, streamed the same way: the counts of <testsuites> and <testsuite> and the suite's
// <properties> (interrupted, unfinished, tensors not checked) go into reserved blank space of the
// opening tags, patched by finish().
class JunitStream {
 public:
  JunitStream(const std::string& path, const RunContext& ctx);
  void add(const RunContext& ctx, const CaseRecord& r);
  void finish(const RunContext& ctx, const RunTally& t);
  const std::string& path() const { return file_.path(); }

 private:
  StreamedFile file_;
  int64_t suites_at_ = -1, suite_at_ = -1, properties_at_ = -1;
};
// Per-tensor metrics of one case (what `repro` prints).
std::string checks_table(const CaseVerdict& v);

// `dsa-parity repro FILE --backend B`, quoted for a POSIX shell.
std::string repro_command(const std::string& case_file, const std::string& backend);
std::string shell_quote(const std::string& s);

void write_text_file(const std::string& path, const std::string& text);  // creates parent folders

// Progress on stderr: on a TTY one redrawn line (cases done, failures, rate, ETA from the case count
// or the time budget, whichever is given); off a TTY one line every every_s seconds (0 = none):
// "progress: 120 cases, 118 passed, 2 failed, 3.1 cases/s, ETA 40 s".
class Progress {
 public:
  Progress(bool enabled, std::optional<int64_t> total, std::optional<double> budget_s, double every_s = 0);
  void update(int64_t done, int64_t failures, int64_t passed = -1);
  void finish();

 private:
  bool enabled_, tty_ = false;
  double every_ = 0;
  std::optional<int64_t> total_;
  std::optional<double> budget_;
  std::chrono::steady_clock::time_point start_;
  bool drawn_ = false;
  double last_ = 0;
};

}  // namespace dsa
