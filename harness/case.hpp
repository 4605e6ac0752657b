// A case (`dsa-parity/case/v1`, DESIGN.md): the problem, the seed and the adversarial features.
// The JSON alone reproduces it: every tensor is a pure function of (seed, tensor name, index).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/catalogue.hpp"
#include "core/inputs.hpp"
#include "core/problem.hpp"

namespace dsa {

inline constexpr const char* kCaseSchema = "dsa-parity/case/v1";

// Adversarial features of the generated inputs (SPEC.md §3, §10).
struct InitSpec {
  std::string distribution = "normal";  // normal | uniform
  double scale = 1.0;                   // input standard deviation
  bool score_ties = false;       // indexer weights and keys that make exact score ties (ReLU zeros, duplicated k_I rows)
  bool zero_rows = false;        // all-zero rows of q_I and k_I (u == 0 exactly, where φ' matters)
  bool large_logits = false;     // query/key scales that give logits of tens to hundreds
  bool huge_future_k_I = false;  // huge finite values in k_I rows no earlier query can see
  bool poison_pad_keys = false;  // NaN in key-side rows (c, k_pe, k_I) of pad rows; pad_rows=masked only
  bool inject_indices = false;   // −1, INT_MIN, Tp, huge and non-causal indices given to the attention
  // Written to the case JSON only when true (absent = false), so that every case from before these
  // fields existed keeps its exact JSON.
  bool hot_keys = false;           // a few early keys of each segment that every row's top-k takes (dK/dV contention)
  bool duplicate_indices = false;  // injected rows that repeat a valid index (S(g) is a set); needs inject_indices
};

// Stages whose outputs are checked (all by default).
inline std::vector<Stage> all_stages() { return {std::begin(kStages), std::end(kStages)}; }

// Both MLA paths (SPEC.md §5), in the order reports list them.
inline const std::vector<Path>& all_paths() {
  static const std::vector<Path> p = {Path::absorbed, Path::explicit_};
  return p;
}

struct Case {
  uint64_t seed = 0;
  Problem problem;
  InitSpec init;
  std::vector<Stage> stages = all_stages();
  std::string note;  // free text: where the case came from (edge trap, shrink, generator)

  bool checks(Stage stage) const;
};

// Parse and validate; every error is InvalidInput naming the field (JSON path) and the rule.
Case case_from_json(const nlohmann::json& j);
Case load_case(const std::string& path);
nlohmann::json to_json(const Case& c);
void save_case(const Case& c, const std::string& path);

// The one-line description of a case (test-backend-ops style), e.g.
// dsa(seqlens=5,11 cp=2/zigzag H=4 C=32 K=8 loss=sparse pad=attend ties)
std::string describe(const Case& c);

}  // namespace dsa
