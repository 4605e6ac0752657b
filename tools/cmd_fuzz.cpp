// dsa-parity fuzz: the corpus, then seeded random cases of a profile, through one backend.
#include <cmath>
#include <filesystem>

#include "harness/fuzz.hpp"
#include "core/errors.hpp"
#include "tools/command.hpp"
#include "tools/session_args.hpp"

namespace dsa::cli {
namespace {

int run(int argc, char** argv) {
  Args a(argc, argv, session_flags({"seed", "cases", "time-budget", "profile", "corpus", "path"}), session_switches({"shrink"}));
  a.expect_positional({});
  SessionOptions o = session_options(a, "fuzz", argc, argv);
  o.seed = a.get_uint64("seed", 1);  // any uint64, as in case files
  o.profile = a.get_or("profile", "default");
  // Which MLA paths random cases take; auto = those the backend implements (checked against it
  // once the backend is made).
  o.paths = parse_path_flag(a.get_or("path", "auto"));
  if (a.get("cases")) {
    o.cases = a.get_int("cases", 0);
    require(*o.cases >= 1, "--cases", "must be \u2265 1 (a run of no case proves nothing)");
  }
  if (a.get("time-budget")) {
    const double t = a.get_double("time-budget", 0);
    require(std::isfinite(t) && t > 0, "--time-budget", "must be a number of seconds > 0");
    o.time_budget_s = t;
  }
  o.shrink = a.has("shrink");
  // The corpus is replayed first; "none" skips it. Shrunk cases of real backends go to its regressions/.
  std::string corpus = a.get_or("corpus", default_corpus());
  if (corpus == "none") corpus.clear();
  if (!corpus.empty()) {
    o.case_files = corpus_files(corpus, "--corpus");
    o.case_root = std::filesystem::is_directory(corpus) ? corpus : std::filesystem::path(corpus).parent_path().string();
    o.regressions_dir = corpus + "/regressions";
  }
  return run_session(o);
}

RegisterCommand reg({"fuzz",
                     "[--backend B] [--seed S] [--cases N | --time-budget SEC] [--profile smoke|default|nightly|production] "
                     "[--path absorbed|explicit|any|auto] [--report FILE] [--junit FILE] [--shrink] [--corpus DIR|none] "
                     "[--comm nccl|local|auto] [--exec-timeout SEC] [--max-bytes N] [--max-pairs N] [--maxfail N] [-q|-v] "
                     "[--progress-every SEC] [--html FILE] [--keep-worst N]",
                     "replay the corpus, then run seeded random cases on a backend; report every failure with a repro line",
                     run});

}  // namespace
}  // namespace dsa::cli
