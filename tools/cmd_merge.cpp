// dsa-parity merge R1.json R2.json ... -o R.json: the reports of the shards of one run
// (fuzz --shard I/N, replay --shard I/N) into one report (harness/report_merge.hpp).
#include "harness/report_merge.hpp"
#include "core/errors.hpp"
#include "tools/command.hpp"

namespace dsa::cli {
namespace {
namespace cmd_merge {  // its own names in a unity build (README "Layout of the source")

struct Flags {
  std::vector<std::string> reports;
  std::string out, junit, html, keep_worst = "10";
};

Run setup(CLI::App& app) {
  auto f = std::make_shared<Flags>();
  app.add_option("REPORT.json", f->reports,
                 "the shards' reports (dsa-parity/report/v1, written by fuzz or replay --shard I/N); any order "
                 "(required)")
      ->type_name("");
  add_value(app, "-o,--out", f->out, "write the merged report to FILE (required)", "FILE");
  add_value(app, "--junit", f->junit, "write JUnit XML of the merged run to FILE (default: none)", "FILE");
  add_value(app, "--html", f->html, "write the static one-file HTML summary of the merged run to FILE (default: none)",
            "FILE");
  add_value(app, "--keep-worst", f->keep_worst,
            "keep the full records of the N passing cases of worst margin over all the shards", "N")
      ->check(integer_at_least(0));
  return [f, &app] {
    expect_no_extras(app);
    require(!f->reports.empty(), "REPORT.json", "give the reports of the shards to merge");
    require(app.count("--out") > 0, "--out", "is required (the merged report to write)");
    MergeOptions o;
    o.inputs = f->reports;
    o.out = f->out;
    o.junit = f->junit;
    o.html = f->html;
    o.keep_worst = parse_int(f->keep_worst, "--keep-worst");
    o.arguments = command_line();
    return merge_reports(o);
  };
}

RegisterCommand reg({"merge",
                     "merge the reports of the shards of one run (--shard I/N) into one report, as the unsharded "
                     "run would have written it; says which shards are missing",
                     "  dsa-parity merge r0.json r1.json r2.json r3.json -o r.json --junit j.xml --html r.html",
                     setup});

}  // namespace cmd_merge
}  // namespace
}  // namespace dsa::cli
