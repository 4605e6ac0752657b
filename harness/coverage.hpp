// Coverage of a run (issue 12): how many of its cases reach what SPEC.md §10 says the kernels
// specialize on, so that a nightly that never left the small shapes says so. Counted per case:
// width class (production widths vs small), head count H, regime (sparse: Tp >= 4·K with
// K >= 512, the top-k actually selects; else dense), CP size, and the structures of §10 (hot
// keys, duplicated injected indices, rows with fewer valid keys than K, an all-padding CP rank,
// sequences straddling a CP rank boundary).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/case.hpp"

namespace dsa {

// C 512, R 64, DI 128, HI 64 or 32, and (Dn, Dv) = (128, 128) (DeepSeek-V3.2) or (192, 256) (GLM-5).
bool production_widths(const Dims& d);
// Tp >= 4·K with K >= 512.
bool sparse_regime(const Problem& p);
// Some CP rank owns only padding rows.
bool has_all_padding_rank(const Problem& p);
// Under cp >= 2 some real sequence has rows on two ranks or more.
bool straddles_ranks(const Problem& p);
// Some active row sees fewer keys than K (its top-k row has invalid slots).
bool has_rows_short_of_k(const Problem& p);

struct Coverage {
  int64_t cases = 0;
  int64_t production_widths = 0, small_widths = 0;
  int64_t sparse = 0, dense = 0;
  std::map<int64_t, int64_t> heads;  // H → cases
  std::map<int64_t, int64_t> cp;     // cp size → cases
  std::map<std::string, int64_t> structures;  // hot_keys, duplicate_indices, short_of_k, all_padding_rank, straddling

  void add(const Case& c);
  // Adds the counts of other cases (dsa-parity merge: another shard of the run).
  void merge(const Coverage& other);
  // Cases with H ∈ {64, 128}.
  int64_t production_heads() const;
};

Coverage coverage_of(const std::vector<Case>& cases);

// The report summary's `coverage` object (reports/schema/report.schema.json), and back.
nlohmann::json to_json(const Coverage& c);
Coverage coverage_from_json(const nlohmann::json& j);

// One stdout line, e.g. "coverage: 400 cases; widths production 140 (35%) small 260; H 64|128
// 140 (35%) [H 1:20 ...]; sparse 140 (35%) dense 260; cp 1:80 2:80 ...; hot_keys 90 ...".
std::string coverage_line(const Coverage& c);

}  // namespace dsa
