// The GPU oracle (issue 12 item 1): the same DSA core as the CPU reference's global run_core
// (SPEC.md §3–§8), computed unfused on one CUDA device, exact (fp64) or under the bf16 policy.
// Plain C++: the harness includes it without nvcc. It shares no code with fused/.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "check/gpu/held.hpp"
#include "core/inputs.hpp"
#include "core/layout.hpp"
#include "core/problem.hpp"
#include "core/result.hpp"
#include "core/tensor.hpp"

namespace dsa {

// Seconds spent in each part of one run (device work is synchronized per part). attention: the
// attention's forward and backward, which run chunk by chunk in one pass.
struct GpuOracleTimings {
  double upload = 0, indexer = 0, select = 0, attention = 0, loss = 0, download = 0, total = 0;
};

// Outputs this large and up are held on the device when GpuOracleOptions::held asks for it; the
// small ones (lse of small cases, KL, the loss) come back to the host as always.
inline constexpr int64_t kHeldElements = int64_t{1} << 20;

// A case's inputs on the device, kept for every run of that case (both precisions, the indexer and
// the attention): each tensor whose values are all bf16 numbers (the generated ones are) as its bf16
// bit patterns, which a run widens there into its own precision; a run takes any other tensor up
// itself. Taking the fp64 inputs up per precision and stage had cost more than the attention.
class DeviceInputs;
std::shared_ptr<const DeviceInputs> gpu_keep_inputs(const Inputs& in);

struct GpuOracleOptions {
  Precision precision = Precision::exact;
  const DeviceInputs* kept_inputs = nullptr;  // this run's case's, when kept
  // [Tp, K'] global rows used by the attention and the loss instead of the indexer's top-k.
  std::optional<TensorI> attention_indices;
  // Sparse loss: reuse the attention's lse (SPEC.md §7). Here both forms give the forward's P bit
  // for bit (the same logits, normalized by the same sum), so the target is taken from it.
  bool streaming_kl = true;
  int64_t max_score_elements = 1 << 22;  // scores are returned only when Tp² is at most this
  bool indexer = true;                   // false: no scores / top-k; attention_indices is required
  bool attention = true;                 // false: scores and top-k only
  // Device memory the chunked stages may use for their scratch; 0 = automatic (a share of the
  // free memory). Small values force many row chunks (the tests use that).
  int64_t max_workspace_bytes = 0;
  GpuOracleTimings* timings = nullptr;   // filled when set
  // When set, the attention run's outputs of at least held_min_elements elements stay on the device
  // and go here by name (their Result tensors are left empty): for a comparison there.
  gpu::HeldOutputs* held = nullptr;
  int64_t held_min_elements = kHeldElements;  // the tests hold every tensor
};

// Same semantics and output shapes as run_core(p, in, {precision, attention_indices, streaming_kl,
// max_score_elements}): Result rows in global order. Throws InvalidInput on bad shapes and
// Unavailable when no CUDA device is present.
Result gpu_oracle_run(const Problem& p, const StreamLayout& L, const Inputs& in, const GpuOracleOptions& opt);

// The indexer scores I[g, t] of query rows [r0, r0 + rows) over every key t < Tp (−inf where t is
// not visible), exact or under the bf16 policy: the rows gpu_oracle_run computes, for cases whose
// full [Tp, Tp] matrix is too large to return.
TensorD gpu_oracle_score_rows(const Problem& p, const StreamLayout& L, const Inputs& in, Precision precision,
                              int64_t r0, int64_t rows);

// Whether a CUDA device is present.
bool gpu_oracle_available();

// The current device's free memory in bytes (0 without a device).
int64_t gpu_oracle_free_bytes();
// The device's whole memory (0 without a device).
int64_t gpu_oracle_total_bytes();

}  // namespace dsa
