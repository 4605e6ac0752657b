// dsa-parity layout: the CP sharding of a packed stream, as a table or as JSON.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "core/layout.hpp"
#include "tools/args.hpp"
#include "tools/command.hpp"
#include "tools/limit_args.hpp"

namespace dsa::cli {
namespace {

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

int run(int argc, char** argv) {
  Args a(argc, argv, with_limit_flags({"seqlens", "cp", "layout", "pad-multiple"}), {"json"});
  apply_limit_flags(a);
  a.expect_positional({});
  require(a.get("seqlens").has_value(), "--seqlens", "is required (comma-separated lengths, e.g. 5,11)");
  CpSpec cp;
  cp.size = a.get_int("cp", 1);
  cp.layout = parse_layout(a.get_or("layout", "zigzag"), "--layout");
  cp.pad_multiple = a.get_int("pad-multiple", 0);
  Problem p;  // the default dims: only the layout's own tables are built here
  p.seqlens = a.get_int_list("seqlens");
  p.cp = cp;
  check_bounds(p);  // before make_layout allocates: `--cp 1000000000` is refused, not OOM-killed
  StreamLayout L = make_layout(p.seqlens, cp);
  if (a.has("json"))
    std::printf("%s\n", layout_json(L).dump().c_str());
  else
    print_table(L);
  return 0;
}

RegisterCommand reg({"layout", "--seqlens 5,11 [--cp N] [--layout zigzag|contiguous] [--pad-multiple M] [--json] [--max-bytes N] [--max-pairs N]",
                     "show which global rows each CP rank owns, real or pad, and each row's visible keys", run});

}  // namespace
}  // namespace dsa::cli
