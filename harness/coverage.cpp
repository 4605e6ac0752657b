#include "harness/coverage.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/layout.hpp"

namespace dsa {

bool production_widths(const Dims& d) {
  const bool dv = (d.Dn == 128 && d.Dv == 128) || (d.Dn == 192 && d.Dv == 256);
  return d.C == 512 && d.R == 64 && d.DI == 128 && (d.HI == 64 || d.HI == 32) && dv;
}

namespace {
StreamLayout layout_of(const Problem& p) { return make_layout(p.seqlens, p.cp, p.pad_rows); }

std::string pct(int64_t n, int64_t total) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", total ? 100.0 * double(n) / double(total) : 0.0);
  return b;
}
}  // namespace

bool sparse_regime(const Problem& p) { return p.topk >= 512 && layout_of(p).tp >= 4 * p.topk; }

bool has_all_padding_rank(const Problem& p) {
  const StreamLayout L = layout_of(p);
  for (const auto& rows : L.rank_rows)
    if (std::none_of(rows.begin(), rows.end(), [&](int64_t g) { return L.is_real(g); })) return true;
  return false;
}

bool straddles_ranks(const Problem& p) {
  if (p.cp.size < 2) return false;
  const StreamLayout L = layout_of(p);
  std::vector<int> owner(L.tp, 0);
  for (size_t r = 0; r < L.rank_rows.size(); ++r)
    for (int64_t g : L.rank_rows[r]) owner[g] = int(r);
  for (int64_t s = 0; s < L.segments(); ++s) {
    const int64_t b = L.cu[s], e = L.cu[s] + L.lengths[s];
    for (int64_t g = b + 1; g < e; ++g)
      if (owner[g] != owner[b]) return true;
  }
  return false;
}

bool has_rows_short_of_k(const Problem& p) {
  const StreamLayout L = layout_of(p);
  for (int64_t g = 0; g < L.tp; ++g)
    if (L.active(g) && L.key_end(g) - L.key_begin(g) < p.topk) return true;
  return false;
}

void Coverage::add(const Case& c) {
  const Problem& p = c.problem;
  ++cases;
  ++(dsa::production_widths(p.dims) ? production_widths : small_widths);
  ++(dsa::sparse_regime(p) ? sparse : dense);
  ++heads[p.dims.H];
  ++cp[p.cp.size];
  auto& st = structures;
  for (const char* k : {"hot_keys", "duplicate_indices", "short_of_k", "all_padding_rank", "straddling"}) st[k] += 0;
  st["hot_keys"] += c.init.hot_keys;
  st["duplicate_indices"] += c.init.duplicate_indices && c.init.inject_indices;
  st["short_of_k"] += has_rows_short_of_k(p);
  st["all_padding_rank"] += has_all_padding_rank(p);
  st["straddling"] += straddles_ranks(p);
}

void Coverage::merge(const Coverage& o) {
  cases += o.cases;
  production_widths += o.production_widths;
  small_widths += o.small_widths;
  sparse += o.sparse;
  dense += o.dense;
  for (auto [h, n] : o.heads) heads[h] += n;
  for (auto [s, n] : o.cp) cp[s] += n;
  for (auto& [k, n] : o.structures) structures[k] += n;
}

int64_t Coverage::production_heads() const {
  int64_t n = 0;
  for (auto [h, k] : heads) n += (h == 64 || h == 128) ? k : 0;
  return n;
}

Coverage coverage_of(const std::vector<Case>& cases) {
  Coverage c;
  for (const Case& x : cases) c.add(x);
  return c;
}

nlohmann::json to_json(const Coverage& c) {
  nlohmann::json heads = nlohmann::json::object(), cp = nlohmann::json::object();
  for (auto [h, n] : c.heads) heads[std::to_string(h)] = n;
  for (auto [s, n] : c.cp) cp[std::to_string(s)] = n;
  return {{"cases", c.cases},
          {"widths", {{"production", c.production_widths}, {"small", c.small_widths}}},
          {"regime", {{"sparse", c.sparse}, {"dense", c.dense}}},
          {"heads", heads},
          {"production_heads", c.production_heads()},
          {"cp", cp},
          {"structures", c.structures}};
}

Coverage coverage_from_json(const nlohmann::json& j) {
  Coverage c;
  c.cases = j.at("cases").get<int64_t>();
  c.production_widths = j.at("widths").at("production").get<int64_t>();
  c.small_widths = j.at("widths").at("small").get<int64_t>();
  c.sparse = j.at("regime").at("sparse").get<int64_t>();
  c.dense = j.at("regime").at("dense").get<int64_t>();
  for (auto& [h, n] : j.at("heads").items()) c.heads[std::stoll(h)] = n.get<int64_t>();
  for (auto& [s, n] : j.at("cp").items()) c.cp[std::stoll(s)] = n.get<int64_t>();
  for (auto& [k, n] : j.at("structures").items()) c.structures[k] = n.get<int64_t>();
  return c;
}

std::string coverage_line(const Coverage& c) {
  std::ostringstream o;
  o << "coverage: " << c.cases << " cases; widths production " << c.production_widths << " ("
    << pct(c.production_widths, c.cases) << ") small " << c.small_widths << "; H 64|128 " << c.production_heads()
    << " (" << pct(c.production_heads(), c.cases) << ") [H";
  for (auto [h, n] : c.heads) o << " " << h << ":" << n;
  o << "]; sparse " << c.sparse << " (" << pct(c.sparse, c.cases) << ") dense " << c.dense << "; cp";
  for (auto [s, n] : c.cp) o << " " << s << ":" << n;
  for (auto& [k, n] : c.structures) o << "; " << k << " " << n;
  return o.str();
}

}  // namespace dsa
