// dsa-parity diff A.json B.json: what changed between two reports — the buckets that are new in B,
// fixed (in A only) and persisting, and how each tensor's worst margin moved.
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "harness/report_read.hpp"
#include "tools/command.hpp"

namespace dsa::cli {
namespace {
namespace cmd_diff {  // its own names in a unity build (README "Layout of the source")

using nlohmann::json;

// bucket -> count. Buckets of reports written before the tags left the bucket string
// (".../mismatch/cp+pad") are read without their tags part.
std::map<std::string, int64_t> buckets_of(const json& r) {
  std::map<std::string, int64_t> m;
  for (auto& b : r["summary"].value("buckets", json::array())) {
    std::string name = b.value("bucket", "");
    if (b.contains("stage") && b.contains("tensor") && b.contains("class")) {
      const std::string tail = "/" + b["stage"].get<std::string>() + "/" + b["tensor"].get<std::string>() + "/" +
                               b["class"].get<std::string>();
      const size_t at = name.rfind(tail);
      if (at != std::string::npos) name = name.substr(0, at + tail.size());
    }
    m[name] += b.value("count", int64_t{0});
  }
  return m;
}

// "stage/tensor" -> worst margin (NaN when null: infinite).
std::map<std::string, double> margins_of(const json& r) {
  std::map<std::string, double> m;
  for (auto& x : r["summary"].value("margins", json::array()))
    m[x.value("stage", "") + "/" + x.value("tensor", "")] =
        x["worst_margin"].is_number() ? x["worst_margin"].get<double>() : INFINITY;
  return m;
}

json num(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

std::string text_of(double x) {
  if (std::isnan(x)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

int run(const std::string& a_path, const std::string& b_path, bool as_json) {
  const json ra = read_report(a_path, a_path), rb = read_report(b_path, b_path);
  const auto ba = buckets_of(ra), bb = buckets_of(rb);
  const auto ma = margins_of(ra), mb = margins_of(rb);

  json out = {{"new", json::array()}, {"fixed", json::array()}, {"persisting", json::array()}, {"margins", json::array()}};
  for (auto& [b, n] : bb)
    if (!ba.count(b)) out["new"].push_back({{"bucket", b}, {"count", n}});
  for (auto& [b, n] : ba)
    if (!bb.count(b)) out["fixed"].push_back({{"bucket", b}, {"count", n}});
  for (auto& [b, n] : bb)
    if (ba.count(b)) out["persisting"].push_back({{"bucket", b}, {"count_a", ba.at(b)}, {"count_b", n}});
  std::map<std::string, std::pair<double, double>> all;
  for (auto& [k, v] : ma) all[k] = {v, NAN};
  for (auto& [k, v] : mb) {
    if (!all.count(k)) all[k] = {NAN, v};
    else all[k].second = v;
  }
  for (auto& [k, v] : all) {
    const size_t slash = k.find('/');
    json e = {{"stage", k.substr(0, slash)}, {"tensor", k.substr(slash + 1)}, {"a", num(v.first)}, {"b", num(v.second)}};
    e["change"] = std::isfinite(v.first) && std::isfinite(v.second) && v.first > 0 ? num(v.second / v.first) : json(nullptr);
    out["margins"].push_back(e);
  }

  if (as_json) {
    std::printf("%s\n", out.dump(1).c_str());
    return 0;
  }
  std::printf("buckets: %zu new, %zu fixed, %zu persisting\n", out["new"].size(), out["fixed"].size(),
              out["persisting"].size());
  for (auto& e : out["new"])
    std::printf("  new         %s (%lld cases)\n", e["bucket"].get<std::string>().c_str(), (long long)e["count"].get<int64_t>());
  for (auto& e : out["fixed"])
    std::printf("  fixed       %s (%lld cases in A)\n", e["bucket"].get<std::string>().c_str(), (long long)e["count"].get<int64_t>());
  for (auto& e : out["persisting"])
    std::printf("  persisting  %s (%lld -> %lld cases)\n", e["bucket"].get<std::string>().c_str(),
                (long long)e["count_a"].get<int64_t>(), (long long)e["count_b"].get<int64_t>());
  std::printf("\nworst margin per tensor (A -> B):\n  %-18s %-12s %10s %10s  %s\n", "stage", "tensor", "A", "B", "move");
  for (auto& [k, v] : all) {
    const size_t slash = k.find('/');
    std::string move = "";
    if (std::isnan(v.first)) move = "only in B";
    else if (std::isnan(v.second)) move = "only in A";
    else if (v.first > 0 && std::isfinite(v.first) && std::isfinite(v.second)) {
      char b[32];
      std::snprintf(b, sizeof b, "x%.3g", v.second / v.first);
      move = b;
      if (v.first <= 1 && v.second > 1) move += "  now failing";
      if (v.first > 1 && v.second <= 1) move += "  now passing";
    }
    std::printf("  %-18s %-12s %10s %10s  %s\n", k.substr(0, slash).c_str(), k.substr(slash + 1).c_str(),
                std::isinf(v.first) ? "inf" : text_of(v.first).c_str(), std::isinf(v.second) ? "inf" : text_of(v.second).c_str(),
                move.c_str());
  }
  return 0;
}

struct Flags {
  std::string a, b;
  bool json = false;
};

Run setup(CLI::App& app) {
  auto f = std::make_shared<Flags>();
  add_positional(app, "A.json", f->a, "the earlier report");
  add_positional(app, "B.json", f->b, "the later report");
  add_switch(app, "--json", f->json, "print the differences as JSON (new, fixed, persisting, margins)");
  return [f, &app] {
    expect_positional(app, "A.json", f->a);
    expect_positional(app, "B.json", f->b);
    return run(f->a, f->b, f->json);
  };
}

RegisterCommand reg({"diff",
                     "compare two reports: new, fixed and persisting buckets, and each tensor's worst-margin move",
                     "  dsa-parity diff nightly-monday.json nightly-tuesday.json", setup});

}  // namespace cmd_diff
}  // namespace
}  // namespace dsa::cli
