// dsa-parity replay: every case file of a folder (edge/ first, then regressions/, then the rest).
#include "harness/fuzz.hpp"
#include "reference/errors.hpp"
#include "tools/args.hpp"
#include "tools/command.hpp"

namespace dsa::cli {
namespace {

int run(int argc, char** argv) {
  Args a(argc, argv, {"backend", "report", "junit", "comm"});
  a.expect_positional({"DIR"});
  SessionOptions o;
  o.command = "replay";
  for (int i = 0; i < argc; ++i) o.arguments.push_back(argv[i]);
  o.backend = a.get_or("backend", "auto");
  o.backend_opt.comm = a.get_or("comm", "auto");
  o.random = false;
  o.case_files = corpus_files(a.positional()[0], "DIR");
  require(!o.case_files.empty(), "DIR", "'" + a.positional()[0] + "' holds no *.json case file");
  o.report = a.get_or("report", "");
  o.junit = a.get_or("junit", "");
  return run_session(o);
}

RegisterCommand reg({"replay", "DIR [--backend B] [--report FILE] [--junit FILE] [--comm nccl|local|auto]",
                     "run every case file under DIR (a regression corpus) on a backend", run});

}  // namespace
}  // namespace dsa::cli
