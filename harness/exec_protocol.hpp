// The exec:CMD protocol (README "External backends"): the harness writes FOLDER/case.json,
// FOLDER/layout.json and FOLDER/inputs.safetensors, runs `CMD FOLDER`, and reads
// FOLDER/outputs.safetensors. exec2:CMD (protocol v2) writes the same folder per case and talks to
// one persistent worker over stdin/stdout (harness/exec2_wire.hpp).
//
// inputs.safetensors: the ten inputs of SPEC.md §0 in BF16 (q_nope … dO), I32 cu_padded
// [segments+1] (segment starts of the padded stream, the contiguous layout's trailing pad segment
// included), I32 real [Tp] (1 for real rows, 0 for pad rows), and I32 indices [Tp, K'] when the
// case injects the attention's indices, I32 rank_rows [cp, Tp/cp] (StreamLayout::rank_rows: each
// rank's global rows in local order; metadata cp, layout, pad_rows). layout.json carries the same
// layout as JSON (layout_json). outputs.safetensors: any of output_names(), rows in global stream
// order; topk I32 or I64, every other output F32, BF16, F16 or F64. A missing output is not checked.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "harness/case.hpp"
#include "harness/safetensors.hpp"
#include "core/result.hpp"

namespace dsa::exec {

// scores, topk, O, O_lat, lse, kl, loss, then the gradients (Result's names).
const std::vector<std::string>& output_names();
// The shape an output must have; K' = topk_width(K, Tp).
Shape output_shape(const std::string& name, const Problem& p, int64_t tp);

st::File inputs_file(const Case& c, const Inputs& in, const std::optional<TensorI>& injected);
// The CP layout of the case for a backend that shards: {"format": "dsa-parity/exec-layout/v1", tp,
// cp, layout, pad_multiple, pad_rows, rows_per_rank, cu_padded, lengths, real, rank_rows}.
std::string layout_json(const Case& c);
// THE tensor catalogue (core/catalogue.hpp) as JSON, what `dsa-parity catalogue --json` prints and
// what exec2 writes to SESSION/catalogue.json: {"format": "dsa-parity/catalogue/v1", stages,
// extents, tensors: [{name, role, stage, dtype, shape, optional, meaning}], exec: {input_dtype,
// index_dtypes, float_dtypes}}.
std::string catalogue_json();
// FOLDER/case.json, FOLDER/layout.json and FOLDER/inputs.safetensors.
void write_inputs(const std::string& folder, const Case& c, const Inputs& in, const std::optional<TensorI>& injected);

struct FolderInputs {
  Case c;
  Inputs in;
  std::optional<TensorI> injected;
};
// Reads what write_inputs wrote (the exec-worker side). InvalidInput for a bad case.json,
// std::runtime_error for a malformed or inconsistent inputs.safetensors.
FolderInputs read_inputs(const std::string& folder);

enum class FloatOut {
  f32_when_exact,  // F32 for every tensor whose values are all floats, else F64 (lossless)
  f64,             // always F64 (the exact reference's outputs)
};
st::File outputs_file(const Result& r, FloatOut policy);
// Parses an outputs file against the case: unknown names, wrong dtypes and wrong shapes are
// std::runtime_error; outputs not in the file stay empty in the Result. The file is read only as a
// regular file inside its folder (a symlink out of it, a FIFO, a device or a directory is refused),
// of at most bounds' max_outputs_file_bytes (every output at F64 plus header room), and by the
// deadline ("timed out" in the message otherwise).
Result read_outputs(const std::string& path, const Case& c,
                    std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);

}  // namespace dsa::exec
