// THE tensor catalogue: every input, output and gradient of SPEC.md §0–§7, with its name, shape
// rule, dtype, stage and role. Case files, safetensors I/O, the comparison, reports, the CLI and
// the tests all read it; nothing else lists tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/problem.hpp"
#include "core/tensor.hpp"

namespace dsa {

// The stages a case checks (case "stages"), in the order the core runs them.
enum class Stage { indexer, attention, attention_backward, loss, loss_backward };
inline constexpr Stage kStages[] = {Stage::indexer, Stage::attention, Stage::attention_backward, Stage::loss,
                                    Stage::loss_backward};
const char* name(Stage s);
std::optional<Stage> parse_stage(std::string_view s);

enum class Role {
  input,     // SPEC §0: generated, bf16 values
  injected,  // indices given straight to the attention (case init.inject_indices)
  output,    // a forward value (α = 2)
  gradient,  // a gradient (α = 3)
};

// What a device buffer or a safetensors file holds for the tensor.
enum class DType { bf16, fp32, i32 };
const char* name(DType d);

// One symbolic extent of a shape rule.
enum class Extent { Tp, K, H, Dn, R, C, Dv, HI, DI, one };

struct TensorSpec {
  std::string_view name;
  Role role;
  Stage stage;  // the stage that produces it (inputs: the first stage that reads it)
  DType dtype;
  std::vector<Extent> shape;
  bool optional = false;  // produced only when small (the [Tp, Tp] scores); a backend may omit it
  std::string_view meaning;

  bool row_indexed() const { return !shape.empty() && shape[0] == Extent::Tp; }
  // The second index is a head (lse [Tp,H], dw [Tp,HI], and every [Tp, heads, dim] tensor).
  bool second_index_is_head() const {
    return shape.size() >= 3 || (shape.size() == 2 && (shape[1] == Extent::H || shape[1] == Extent::HI));
  }
  // α of SPEC.md §9: 3 for gradients, 2 for forward values.
  double alpha() const { return role == Role::gradient ? 3.0 : 2.0; }
  bool is_result() const { return role == Role::output || role == Role::gradient; }
};

// Every tensor, inputs first (SPEC §0 order), then the results in stage order.
const std::vector<TensorSpec>& catalogue();
// nullptr when `name` is not in the catalogue.
const TensorSpec* find_tensor(std::string_view name);
// Throws std::invalid_argument for a name outside the catalogue (a programming error).
const TensorSpec& tensor_spec(std::string_view name);
// The inputs (role input), and the results (output or gradient), in catalogue order.
std::vector<const TensorSpec*> input_specs();
std::vector<const TensorSpec*> result_specs();
// "q_nope, q_pe, ..." of a list, for error messages.
std::string names_of(const std::vector<const TensorSpec*>& specs);

// The concrete shape of a tensor for dims d, a padded stream of tp rows and top-k K.
Shape shape_of(const TensorSpec& t, const Dims& d, int64_t tp, int64_t topk);
// The shape rule as text, e.g. "[Tp, H, Dn]".
std::string shape_rule(const TensorSpec& t);

}  // namespace dsa
