// dsa-parity replay: every case file of a folder (edge/ first, then regressions/, then the rest).
#include <filesystem>

#include "harness/fuzz.hpp"
#include "core/errors.hpp"
#include "tools/command.hpp"
#include "tools/session_args.hpp"

namespace dsa::cli {
namespace {

int run(int argc, char** argv) {
  Args a(argc, argv, session_flags(), session_switches());
  a.expect_positional({"DIR"});
  SessionOptions o = session_options(a, "replay", argc, argv);
  o.random = false;
  o.case_files = corpus_files(a.positional()[0], "DIR");
  o.case_root = std::filesystem::is_directory(a.positional()[0])
                    ? a.positional()[0]
                    : std::filesystem::path(a.positional()[0]).parent_path().string();
  require(!o.case_files.empty(), "DIR", "'" + a.positional()[0] + "' holds no *.json case file");
  return run_session(o);
}

RegisterCommand reg({"replay", "DIR [--backend B] [--report FILE] [--junit FILE] [--comm nccl|local|auto] [--exec-timeout SEC] [--max-bytes N] [--max-pairs N]",
                     "run every case file under DIR (a regression corpus) on a backend", run});

}  // namespace
}  // namespace dsa::cli
