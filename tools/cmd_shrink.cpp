// dsa-parity shrink: reduce a failing case while its failure holds; write the reproducer.
#include "harness/fuzz.hpp"
#include "core/errors.hpp"
#include "tools/command.hpp"
#include "tools/limit_args.hpp"
#include "tools/session_args.hpp"

namespace dsa::cli {
namespace {
namespace cmd_shrink {  // its own names in a unity build (README "Layout of the source")

struct Flags {
  std::string file, backend = "auto", out, time_budget = "60", comm = "auto";
  LimitFlags limits;
};

Run setup(CLI::App& app) {
  auto f = std::make_shared<Flags>();
  add_positional(app, "CASE.json", f->file, "the failing case file");
  add_value(app, "--backend", f->backend, std::string("the implementation the case fails on: ") + kBackendHelp, "B");
  add_value(app, "--out", f->out, "where to write the shrunk case", "FILE",
            "cases/regressions/<bucket>.json (a mutant's: ./dsa-parity-out/)");
  add_value(app, "--time-budget", f->time_budget, "stop shrinking after SEC seconds", "SEC")->check(seconds_value());
  add_comm_flag(app, f->comm);
  add_limit_flags(app, f->limits);
  return [f, &app] {
    expect_positional(app, "CASE.json", f->file);
    apply_limit_flags(f->limits);
    BackendOptions bopt;
    bopt.comm = f->comm;
    return run_shrink(f->file, f->backend, bopt, f->out, parse_double(f->time_budget, "--time-budget"));
  };
}

RegisterCommand reg({"shrink", "reduce a failing case while its bucket holds; writes cases/regressions/<bucket>.json or --out",
                     "  dsa-parity shrink failing.json --backend mutant:kl_reversed --out small.json", setup});

}  // namespace cmd_shrink
}  // namespace
}  // namespace dsa::cli
