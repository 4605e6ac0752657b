// dsa-parity layout: the CP sharding of a packed stream, as a table or as JSON.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "core/layout.hpp"
#include "tools/command.hpp"
#include "tools/limit_args.hpp"

namespace dsa::cli {
namespace {
namespace cmd_layout {  // its own names in a unity build (README "Layout of the source")

nlohmann::json layout_json(const StreamLayout& L) {
  nlohmann::json ranks = nlohmann::json::array();
  for (int64_t r = 0; r < L.cp; ++r) {
    nlohmann::json rows = nlohmann::json::array(), real = rows, ks = rows, ke = rows;
    for (int64_t g : L.rank_rows[r]) {
      rows.push_back(g);
      real.push_back(L.is_real(g));
      ks.push_back(L.key_begin(g));
      ke.push_back(L.key_end(g));
    }
    ranks.push_back({{"rank", r}, {"rows", rows}, {"real", real}, {"key_start", ks}, {"key_end", ke}});
  }
  return {{"tp", L.tp}, {"cu_padded", L.cu}, {"ranks", ranks}};
}

void print_table(const StreamLayout& L) {
  std::printf("Tp = %lld, cp = %lld, layout = %s, segments:", (long long)L.tp, (long long)L.cp, name(L.kind));
  for (int64_t s = 0; s < L.segments(); ++s)
    std::printf(" [%lld, %lld) real %lld", (long long)L.cu[s], (long long)L.cu[s + 1], (long long)L.lengths[s]);
  std::printf("\n%6s %6s %8s %5s %5s %6s %12s\n", "rank", "local", "global", "seq", "pos", "real", "keys");
  for (int64_t r = 0; r < L.cp; ++r)
    for (size_t i = 0; i < L.rank_rows[r].size(); ++i) {
      int64_t g = L.rank_rows[r][i];
      std::printf("%6lld %6zu %8lld %5d %5lld %6s  [%lld, %lld)\n", (long long)r, i, (long long)g, L.seg[g],
                  (long long)L.pos(g), L.is_real(g) ? "yes" : "pad", (long long)L.key_begin(g),
                  (long long)L.key_end(g));
    }
}

struct Flags {
  std::string seqlens, cp = "1", layout = "zigzag", pad_multiple = "0";
  bool json = false;
  LimitFlags limits;
};

Run setup(CLI::App& app) {
  auto f = std::make_shared<Flags>();
  add_value(app, "--seqlens", f->seqlens, "the real lengths of the packed sequences, comma-separated (required)",
            "5,11")
      ->check(int_list_value());
  add_value(app, "--cp", f->cp, "the number of context-parallel ranks", "N")->check(integer_at_least(INT64_MIN));
  add_value(app, "--layout", f->layout, "how rows are dealt to the ranks", "zigzag|contiguous")
      ->check(one_of({"zigzag", "contiguous"}));
  add_value(app, "--pad-multiple", f->pad_multiple,
            "pad every sequence to a multiple of M rows (0: the layout's own rule)", "M")
      ->check(integer_at_least(INT64_MIN));
  add_switch(app, "--json", f->json, "print JSON ({tp, cu_padded, ranks}) instead of the table");
  add_limit_flags(app, f->limits);
  return [f, &app] {
    expect_no_extras(app);
    apply_limit_flags(f->limits);
    require(app.count("--seqlens") > 0, "--seqlens", "is required (comma-separated lengths, e.g. 5,11)");
    CpSpec cp;
    cp.size = parse_int(f->cp, "--cp");
    cp.layout = parse_layout(f->layout, "--layout");
    cp.pad_multiple = parse_int(f->pad_multiple, "--pad-multiple");
    Problem p;  // the default dims: only the layout's own tables are built here
    p.seqlens = parse_int_list(f->seqlens, "--seqlens");
    p.cp = cp;
    check_bounds(p);  // before make_layout allocates: `--cp 1000000000` is refused, not OOM-killed
    StreamLayout L = make_layout(p.seqlens, cp);
    if (f->json)
      std::printf("%s\n", layout_json(L).dump().c_str());
    else
      print_table(L);
    return 0;
  };
}

RegisterCommand reg({"layout", "show which global rows each CP rank owns, real or pad, and each row's visible keys",
                     "  dsa-parity layout --seqlens 5,11 --cp 2 --layout zigzag --json", setup});

}  // namespace cmd_layout
}  // namespace
}  // namespace dsa::cli
