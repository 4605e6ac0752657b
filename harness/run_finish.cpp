#include "harness/run_finish.hpp"

#include <cstdio>

namespace dsa {

void print_run_summary(const RunContext& ctx, const RunTally& tally, bool quiet) {
  std::printf("%s", summary_table(tally, ctx.seconds, ctx.interrupted).c_str());
  std::printf("%s\n", coverage_line(tally.coverage).c_str());  // widths, heads, regime, cp, structures
  if (!quiet) std::printf("%s%s", margin_table(tally).c_str(), timing_line(tally, ctx.backend_ahead ? std::optional<double>(ctx.seconds) : std::nullopt).c_str());
  std::printf("%s", agreement_table(tally).c_str());
}

void finish_outputs(const RunContext& ctx, const RunTally& tally, ReportStream* report, JunitStream* junit,
                    const std::string& html) {
  if (report) {
    report->finish(ctx, tally);
    std::printf("report: %s\n", report->path().c_str());
  }
  if (junit) {
    junit->finish(ctx, tally);
    std::printf("junit: %s\n", junit->path().c_str());
  }
  if (!html.empty()) {
    write_text_file(html, html_summary(ctx, tally));
    std::printf("html: %s\n", html.c_str());
  }
  std::fflush(stdout);
}

}  // namespace dsa
