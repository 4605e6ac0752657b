// dsa-parity repro: one case file on one backend, every checked tensor's metrics printed.
#include "harness/fuzz.hpp"
#include "tools/args.hpp"
#include "tools/command.hpp"

namespace dsa::cli {
namespace {

int run(int argc, char** argv) {
  Args a(argc, argv, {"backend", "report", "junit", "comm"});
  a.expect_positional({"CASE.json"});
  SessionOptions o;
  o.command = "repro";
  for (int i = 0; i < argc; ++i) o.arguments.push_back(argv[i]);
  o.backend = a.get_or("backend", "auto");
  o.backend_opt.comm = a.get_or("comm", "auto");
  o.random = false;
  o.case_files = {a.positional()[0]};
  corpus_files(o.case_files[0], "CASE.json");  // exists?
  o.report = a.get_or("report", "");
  o.junit = a.get_or("junit", "");
  o.verbose = true;
  o.progress = false;
  return run_session(o);
}

RegisterCommand reg({"repro", "CASE.json [--backend B] [--report FILE] [--junit FILE] [--comm nccl|local|auto]",
                     "run one case file and print the metrics of every checked tensor", run});

}  // namespace
}  // namespace dsa::cli
