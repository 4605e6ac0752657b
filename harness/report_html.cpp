// The --html summary page: one static XHTML file (no script, no external asset) with the per-tensor
// worst margins as inline SVG bars and the bucket table. Well-formed XML, so any XML parser reads it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "harness/report.hpp"
#include "harness/text.hpp"

namespace dsa {

namespace {

std::string esc(const std::string& raw) { return text::xml_escape(raw); }

std::string fmt(double x) {
  if (!std::isfinite(x)) return "inf";
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

}  // namespace

std::string html_summary(const RunContext& ctx, const RunTally& t) {
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE html>\n"
    << "<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"UTF-8\"/>\n"
    << "<title>dsa-parity " << esc(ctx.command) << " " << esc(ctx.backend) << "</title>\n"
    << "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
       "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;font-size:13px}"
       ".fail{color:#b00}.pass{color:#070}code{font-size:12px}</style>\n</head>\n<body>\n";
  o << "<h1>dsa-parity " << esc(ctx.command) << " on " << esc(ctx.backend) << "</h1>\n";
  o << "<p class=\"" << (t.failed ? "fail" : "pass") << "\">" << t.cases << " cases: " << t.passed << " passed, "
    << t.failed << " failed, " << t.not_run << " not run, " << t.cannot_run << " cannot run; exit "
    << ctx.exit_code << (ctx.interrupted ? ", interrupted" : "") << (ctx.maxfail_reached ? ", stopped at --maxfail" : "")
    << "</p>\n<p>seed " << ctx.master_seed << ", profile " << esc(ctx.profile) << ", oracle " << esc(ctx.oracle)
    << ", started " << esc(ctx.started) << "</p>\n";
  // A shard, or a merge of shards, says which part of the run it covers.
  if (ctx.shard.sharded()) o << "<p>shard " << esc(ctx.shard.text()) << " of the run</p>\n";
  if (ctx.merged.is_object()) {
    const auto& m = ctx.merged;
    o << "<p class=\"" << (m.value("complete", false) ? "pass" : "fail") << "\">merged from "
      << m.value("shards", nlohmann::json::array()).size() << " of " << m.value("shard_count", 0) << " shards";
    if (!m.value("complete", false)) o << "; missing " << esc(m.value("missing", nlohmann::json::array()).dump()) << ": partial coverage";
    o << "</p>\n";
  }

  // Margins: one bar per tensor on a log scale from 1e-4 to 1e4; the line at 1 is the pass limit.
  o << "<h2>Worst margin per tensor</h2>\n<p>e_f / (alpha e_l + floor) over the run; a tensor passes at "
       "&#8804; 1 (the red line). Log scale, 1e-4 to 1e4.</p>\n";
  const int row = 18, label = 260, width = 420, h = row * static_cast<int>(t.margins.size()) + 24;
  auto xof = [&](double m) {
    const double l = std::isfinite(m) ? std::log10(std::max(m, 1e-4)) : 4.0;
    return label + static_cast<int>(std::lround((std::min(l, 4.0) + 4.0) / 8.0 * width));
  };
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << label + width + 80 << "\" height=\"" << h
    << "\" role=\"img\">\n";
  for (size_t i = 0; i < t.margins.size(); ++i) {
    const auto& m = t.margins[i];
    const int y = static_cast<int>(i) * row + 4;
    const int x = xof(m.worst);
    o << "<text x=\"0\" y=\"" << y + 12 << "\" font-size=\"12\">" << esc(m.stage + " " + m.tensor) << "</text>"
      << "<rect x=\"" << label << "\" y=\"" << y << "\" width=\"" << std::max(1, x - label) << "\" height=\""
      << row - 4 << "\" fill=\"" << (m.worst > 1 || !std::isfinite(m.worst) ? "#c33" : "#4a4") << "\"><title>"
      << esc(m.tensor + ": " + fmt(m.worst) + " at case " + std::to_string(m.case_index) + " " + m.where)
      << "</title></rect><text x=\"" << x + 4 << "\" y=\"" << y + 12 << "\" font-size=\"11\">" << fmt(m.worst)
      << "</text>\n";
  }
  const int one = xof(1.0);
  o << "<line x1=\"" << one << "\" y1=\"0\" x2=\"" << one << "\" y2=\"" << h << "\" stroke=\"red\"/>\n</svg>\n";

  o << "<table>\n<tr><th>stage</th><th>tensor</th><th>worst margin</th><th>case</th><th>where</th></tr>\n";
  for (auto& m : t.margins)
    o << "<tr><td>" << esc(m.stage) << "</td><td>" << esc(m.tensor) << "</td><td>" << fmt(m.worst) << "</td><td>"
      << m.case_index << " " << esc(m.description) << "</td><td>" << esc(m.where) << "</td></tr>\n";
  o << "</table>\n";

  o << "<h2>Buckets</h2>\n";
  if (t.buckets.empty()) o << "<p>No failure.</p>\n";
  else {
    o << "<table>\n<tr><th>bucket</th><th>count</th><th>first case</th><th>tags</th><th>repro</th></tr>\n";
    std::vector<const RunTally::Bucket*> sorted;
    for (auto& b : t.buckets) sorted.push_back(&b);
    std::stable_sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->count > b->count; });
    for (auto* b : sorted) {
      std::string tags;
      for (auto& [tag, n] : b->tags) tags += (tags.empty() ? "" : ", ") + tag + ": " + std::to_string(n);
      o << "<tr><td class=\"fail\">" << esc(b->bucket) << "</td><td>" << b->count << "</td><td>" << b->first_case
        << "</td><td>" << esc(tags) << "</td><td><code>" << esc(b->repro) << "</code></td></tr>\n";
    }
    o << "</table>\n";
  }
  o << "</body>\n</html>\n";
  return o.str();
}

}  // namespace dsa
