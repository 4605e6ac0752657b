// dsa-parity shrink: reduce a failing case while its failure holds; write the reproducer.
#include <cmath>

#include "harness/fuzz.hpp"
#include "core/errors.hpp"
#include "tools/args.hpp"
#include "tools/command.hpp"
#include "tools/limit_args.hpp"

namespace dsa::cli {
namespace {

int run(int argc, char** argv) {
  Args a(argc, argv, with_limit_flags({"backend", "out", "time-budget", "comm"}));
  apply_limit_flags(a);
  a.expect_positional({"CASE.json"});
  BackendOptions bopt;
  bopt.comm = a.get_or("comm", "auto");
  const double budget = a.get_double("time-budget", 60);
  require(budget > 0 && std::isfinite(budget), "--time-budget", "must be a number of seconds > 0");
  return run_shrink(a.positional()[0], a.get_or("backend", "auto"), bopt, a.get_or("out", ""), budget);
}

RegisterCommand reg({"shrink", "CASE.json [--backend B] [--out FILE] [--time-budget SEC] [--comm nccl|local|auto] [--max-bytes N] [--max-pairs N]",
                     "reduce a failing case while its bucket holds; writes cases/regressions/<bucket>.json or --out",
                     run});

}  // namespace
}  // namespace dsa::cli
