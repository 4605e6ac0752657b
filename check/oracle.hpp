// The staged oracle (SPEC.md §9): the exact and the low-precision (bf16 policy) side of a case,
// each stage run once per precision. An Oracle is one implementation of those stages (the CPU
// reference here; a GPU one may stand beside it); `judge` (check/judge.hpp) drives it.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "check/compare.hpp"
#include "check/prepared.hpp"
#include "core/result.hpp"

namespace dsa {

// Which stages one oracle call computes.
struct StageRequest {
  bool indexer = true;    // scores (when small enough) and the canonical top-k
  bool attention = true;  // attention forward and backward, the loss and its backward
  // The attention's indices ([Tp, K'], global rows); required when indexer is false. When absent
  // the attention uses the call's own top-k.
  std::optional<TensorI> indices;
  // The oracle may keep large outputs on its device instead of returning them (their Result
  // tensors are then empty; compare_held compares them there). Only where holds_outputs().
  bool hold = false;
  // The calls so marked, until release_held, are all of one case (the judge's): the oracle may keep
  // its inputs where it computes from one call to the next instead of taking them up again.
  bool keep_inputs = false;
};

// How many times each stage ran, per precision: what the tests assert to prove "each stage once".
struct StageCounts {
  std::array<int, 2> indexer{}, attention{};  // [exact, bf16]
  int total() const { return indexer[0] + indexer[1] + attention[0] + attention[1]; }
  StageCounts& operator+=(const StageCounts& o) {
    for (int p = 0; p < 2; ++p) indexer[p] += o.indexer[p], attention[p] += o.attention[p];
    return *this;
  }
  StageCounts operator-(const StageCounts& o) const {  // the runs between two counts()
    StageCounts d = *this;
    for (int p = 0; p < 2; ++p) d.indexer[p] -= o.indexer[p], d.attention[p] -= o.attention[p];
    return d;
  }
};

class Oracle {
 public:
  virtual ~Oracle() = default;
  virtual std::string name() const = 0;
  // The requested stages of case c under one precision policy; rows in global order.
  Result run(const PreparedCase& c, Precision precision, const StageRequest& req);
  // The scores of one row's visible keys, for cases too large to materialize [Tp, Tp].
  virtual std::vector<double> score_row(const PreparedCase& c, int64_t g, Precision precision) = 0;
  // Whether judge may run the two precisions of case c at once, on two threads: an oracle whose
  // runs are mostly device work says yes when both fit on the device (one precision's transfers
  // and host work then hide behind the other's kernels). The CPU reference uses every core
  // already: no.
  virtual bool runs_precisions_at_once(const PreparedCase&) const { return false; }
  // The memory of the device the oracle computes on; 0 when it computes on the host. Its runs then
  // leave the host mostly idle, for the next case's backend run (harness/prefetch.hpp).
  virtual double device_memory_bytes() const { return 0; }
  // Whether this oracle can keep outputs where it computed them (StageRequest::hold). Its held
  // tensors are the last held run's of each precision, until release_held.
  virtual bool holds_outputs() const { return false; }
  // compare_tensor of the backend's `fused` against the held exact and bf16 tensor `name`: the same
  // pass (check/compare_partial.hpp) and verdict. Empty when `name` is not held.
  virtual std::optional<TensorCheck> compare_held(const std::string& /*name*/, const TensorD& /*fused*/,
                                                  const StreamLayout& /*L*/, double /*floor_at_least*/) {
    return std::nullopt;
  }
  // How many held exact values of `name` are not finite (−inf allowed where neg_inf_allowed);
  // empty when `name` is not held.
  virtual std::optional<int64_t> held_exact_nonfinite(const std::string& /*name*/, bool /*neg_inf_allowed*/) {
    return std::nullopt;
  }
  // A held tensor brought to the host (diagnostics, tests); empty when `name` is not held.
  virtual std::optional<TensorD> fetch_held(const std::string& /*name*/, Precision /*precision*/) {
    return std::nullopt;
  }
  // The backend's outputs that compare_held will be given: an oracle that compares on its device may
  // start copying them there now, while its runs compute. Each must stay alive and unchanged until
  // release_held. Default: nothing.
  virtual void upload_backend_outputs(const Result& /*fused*/) {}
  // The inputs of a case judged after the current one, kept now where the oracle computes (what
  // StageRequest::keep_inputs keeps), beside the current case's judge: at production shapes taking
  // them up is a fifth of a judge. Any thread; at most two cases are kept ahead. Default: nothing.
  virtual void keep_inputs_ahead(const PreparedCase& /*c*/) {}
  // Ends what hold and keep_inputs kept.
  virtual void release_held() {}
  StageCounts counts() const {
    std::lock_guard<std::mutex> lock(counts_mu_);
    return counts_;
  }

 protected:
  virtual Result compute(const PreparedCase& c, Precision precision, const StageRequest& req) = 0;

 private:
  mutable std::mutex counts_mu_;
  StageCounts counts_;
};

// The CPU reference (reference/): fp64 exact and the bf16 policy, run globally.
std::unique_ptr<Oracle> make_cpu_oracle();

}  // namespace dsa
