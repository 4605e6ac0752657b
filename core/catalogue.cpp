#include "core/catalogue.hpp"

#include <stdexcept>

#include "core/layout.hpp"

namespace dsa {

namespace {

using E = Extent;
using R = Role;
using S = Stage;
using T = DType;

const char* const kStageNames[] = {"indexer", "attention", "attention_backward", "loss", "loss_backward"};

}  // namespace

const char* name(Stage s) { return kStageNames[static_cast<int>(s)]; }

std::optional<Stage> parse_stage(std::string_view s) {
  for (Stage x : kStages)
    if (s == name(x)) return x;
  return std::nullopt;
}

const char* name(DType d) {
  switch (d) {
    case DType::bf16: return "bf16";
    case DType::fp32: return "fp32";
    case DType::i32: return "i32";
  }
  return "?";
}

const std::vector<TensorSpec>& catalogue() {
  static const std::vector<TensorSpec> c = {
      // Inputs (SPEC §0): bf16 values, generated from (seed, name, index).
      {"q_nope", R::input, S::attention, T::bf16, {E::Tp, E::H, E::Dn}, false, "query nope part"},
      {"q_pe", R::input, S::attention, T::bf16, {E::Tp, E::H, E::R}, false, "query rope part, already rotated"},
      {"c", R::input, S::attention, T::bf16, {E::Tp, E::C}, false, "normalized kv latent (one shared head)"},
      {"k_pe", R::input, S::attention, T::bf16, {E::Tp, E::R}, false, "key rope part, already rotated"},
      {"W_UK", R::input, S::attention, T::bf16, {E::H, E::Dn, E::C}, false, "key up-projection (absorbed into the query)"},
      {"W_UV", R::input, S::attention, T::bf16, {E::H, E::Dv, E::C}, false, "value up-projection"},
      {"q_I", R::input, S::indexer, T::bf16, {E::Tp, E::HI, E::DI}, false, "indexer queries"},
      {"k_I", R::input, S::indexer, T::bf16, {E::Tp, E::DI}, false, "indexer keys (one shared head)"},
      {"w", R::input, S::indexer, T::bf16, {E::Tp, E::HI}, false, "indexer head weights"},
      {"dO", R::input, S::attention_backward, T::bf16, {E::Tp, E::H, E::Dv}, false, "upstream gradient of O"},
      {"indices", R::injected, S::attention, T::i32, {E::Tp, E::K}, true,
       "indices given to the attention instead of the top-k (init.inject_indices)"},
      // Results (SPEC §3–§7), rows in global stream order.
      {"scores", R::output, S::indexer, T::fp32, {E::Tp, E::Tp}, true, "indexer scores I, -inf where not visible"},
      {"topk", R::output, S::indexer, T::i32, {E::Tp, E::K}, false, "indexer top-k, -1 for empty slots"},
      {"O", R::output, S::attention, T::bf16, {E::Tp, E::H, E::Dv}, false, "attention output"},
      {"O_lat", R::output, S::attention, T::bf16, {E::Tp, E::H, E::C}, false, "latent attention output"},
      {"lse", R::output, S::attention, T::fp32, {E::Tp, E::H}, false, "natural-log sum-exp, -inf for empty rows"},
      {"dq_nope", R::gradient, S::attention_backward, T::bf16, {E::Tp, E::H, E::Dn}, false, ""},
      {"dq_pe", R::gradient, S::attention_backward, T::bf16, {E::Tp, E::H, E::R}, false, ""},
      {"dW_UK", R::gradient, S::attention_backward, T::bf16, {E::H, E::Dn, E::C}, false, ""},
      {"dW_UV", R::gradient, S::attention_backward, T::bf16, {E::H, E::Dv, E::C}, false, ""},
      {"dc", R::gradient, S::attention_backward, T::bf16, {E::Tp, E::C}, false, ""},
      {"dk_pe", R::gradient, S::attention_backward, T::bf16, {E::Tp, E::R}, false, ""},
      {"kl", R::output, S::loss, T::fp32, {E::Tp}, false, "per-row KL (0 when not counted)"},
      {"loss", R::output, S::loss, T::fp32, {E::one}, false, "L = coeff·ΣKL/N"},
      {"dq_I", R::gradient, S::loss_backward, T::bf16, {E::Tp, E::HI, E::DI}, false, ""},
      {"dk_I", R::gradient, S::loss_backward, T::bf16, {E::Tp, E::DI}, false, ""},
      {"dw", R::gradient, S::loss_backward, T::bf16, {E::Tp, E::HI}, false, ""},
  };
  return c;
}

const TensorSpec* find_tensor(std::string_view n) {
  for (const TensorSpec& t : catalogue())
    if (t.name == n) return &t;
  return nullptr;
}

const TensorSpec& tensor_spec(std::string_view n) {
  if (const TensorSpec* t = find_tensor(n)) return *t;
  throw std::invalid_argument("not a tensor of the catalogue: " + std::string(n));
}

std::vector<const TensorSpec*> input_specs() {
  std::vector<const TensorSpec*> v;
  for (const TensorSpec& t : catalogue())
    if (t.role == Role::input) v.push_back(&t);
  return v;
}

std::vector<const TensorSpec*> result_specs() {
  std::vector<const TensorSpec*> v;
  for (const TensorSpec& t : catalogue())
    if (t.is_result()) v.push_back(&t);
  return v;
}

std::string names_of(const std::vector<const TensorSpec*>& specs) {
  std::string s;
  for (const TensorSpec* t : specs) s += (s.empty() ? "" : ", ") + std::string(t->name);
  return s;
}

Shape shape_of(const TensorSpec& t, const Dims& d, int64_t tp, int64_t topk) {
  Shape s;
  for (Extent e : t.shape) {
    switch (e) {
      case E::Tp: s.push_back(tp); break;
      case E::K: s.push_back(topk_width(topk, tp)); break;
      case E::H: s.push_back(d.H); break;
      case E::Dn: s.push_back(d.Dn); break;
      case E::R: s.push_back(d.R); break;
      case E::C: s.push_back(d.C); break;
      case E::Dv: s.push_back(d.Dv); break;
      case E::HI: s.push_back(d.HI); break;
      case E::DI: s.push_back(d.DI); break;
      case E::one: s.push_back(1); break;
    }
  }
  return s;
}

std::string shape_rule(const TensorSpec& t) {
  static const char* const names[] = {"Tp", "K'", "H", "Dn", "R", "C", "Dv", "HI", "DI", "1"};
  std::string s = "[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::string(names[static_cast<int>(t.shape[i])]);
  return s + "]";
}

}  // namespace dsa
