// dsa-parity repro: one case file on one backend, every checked tensor's metrics printed.
#include "harness/fuzz.hpp"
#include "tools/command.hpp"
#include "tools/session_args.hpp"

namespace dsa::cli {
namespace {

int run(int argc, char** argv) {
  Args a(argc, argv, session_flags(), session_switches());
  a.expect_positional({"CASE.json"});
  SessionOptions o = session_options(a, "repro", argc, argv);
  o.random = false;
  o.case_files = {a.positional()[0]};
  corpus_files(o.case_files[0], "CASE.json");  // exists?
  o.verbose = true;
  o.progress = false;
  return run_session(o);
}

RegisterCommand reg({"repro", "CASE.json [--backend B] [--report FILE] [--junit FILE] [--comm nccl|local|auto] [--exec-timeout SEC] [--max-bytes N] [--max-pairs N]",
                     "run one case file and print the metrics of every checked tensor", run});

}  // namespace
}  // namespace dsa::cli
