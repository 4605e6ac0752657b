// The one comparison routine of the project (SPEC.md §9): every float tensor of every stage is
// diffed against the exact oracle with the low-precision oracle setting the tolerance, and the
// top-k against the exact scores (SPEC.md §4).
//
// Tolerance: pass iff e_f ≤ α·e_l + floor with e_f = max|X_f − X_exact|, e_l = max|X_lowp − X_exact|
// over the compared (finite) elements, α = 2 for forward values and 3 for gradients.
// floor = kFloorRel · max|X_exact|. e_l is 0 only where the bf16 policy happens to be exact on the
// whole tensor (single-key rows, zero tensors, an fp32 scalar that rounded right); a kernel may
// still differ there by fp32 accumulation order, a few fp32 ulps (2^-24 ≈ 6e-8) of the largest
// element. 1e-6 relative covers ~16 such ulps yet is ~4000× below one bf16 ulp (2^-8), so it never
// hides a real bug; it is relative (no absolute term) so tiny gradients (coeff/N) keep full power,
// and a tensor that is exactly 0 must come back exactly 0.
//
// Unwritten outputs: poisoning is the backend's duty (the cuda and exec backends fill every output
// with NaN before the run); here a NaN where the exact value is finite is failure class "nan".
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "check/compare_partial.hpp"
#include "core/catalogue.hpp"
#include "core/layout.hpp"
#include "core/problem.hpp"
#include "core/result.hpp"
#include "core/verdict.hpp"

namespace dsa {

inline constexpr double kFloorRel = 1e-6;

// Where an element lives: its multi-index, and for row-indexed tensors the global row g with its
// owner (rank, local row), segment (sequence) and position. −1 where it does not apply.
struct Location {
  std::vector<int64_t> index;
  int64_t g = -1, rank = -1, local = -1, sequence = -1, position = -1, head = -1, dim = -1;
};

struct TensorCheck {
  Stage stage = Stage::indexer;
  std::string tensor;           // a catalogue name
  CheckStatus status = CheckStatus::pass;
  Failure failure = Failure::none;  // when status == fail
  std::string detail;           // one line: why it failed, or why it was not checked
  double alpha = 0, floor = 0;
  double e_f = 0, e_l = 0;      // max abs error of the backend and of the lowp oracle
  double ratio = 0;             // e_f / e_l (+inf when e_l = 0 < e_f)
  double max_rel = 0, cosine = 1, rmse = 0;
  int64_t compared = 0;         // elements compared: finite ones, and ±inf at the exact positions
  std::optional<Location> worst;
  double worst_fused = 0, worst_exact = 0, worst_lowp = 0;
  // --repeat (check/repeats.hpp): later runs of the backend against the first, when there were any.
  struct Repeat {
    int runs = 1;              // backend runs in all
    bool deterministic = false;  // declared bitwise reproducible by the backend
    int64_t differing = 0;     // elements whose bits differed in some later run
    double spread = 0;         // max |run_k − run_1| over finite elements
    double spread_ratio = 0;   // spread / (α·e_l + floor)
    // Later runs that selected other keys and were judged on their own (check/repeats.hpp); after
    // the indexer, differing and spread cover only the others.
    int rejudged = 0;
  };
  std::optional<Repeat> repeat;

  bool failed() const { return status == CheckStatus::fail; }
};

// Locates element `flat` of tensor `name` with shape `shape` (global row order) in the layout.
Location locate(const std::string& name, const Shape& shape, int64_t flat, const StreamLayout& L);

// Elements per chunk of the comparison's pass: the unit its partial results are merged in.
inline constexpr int64_t kCompareChunk = int64_t{1} << 16;

// Compares one float tensor. An empty `fused` is "not-checked". Under pad_rows=masked the pad rows
// of row-indexed tensors must be exactly 0 (lse exactly −inf), else "mismatch". The floor is
// kFloorRel·max|X_exact|, or `floor_at_least` where that is larger (the loss, see loss_floor).
TensorCheck compare_tensor(const std::string& name, const TensorD& fused, const TensorD& lowp,
                           const TensorD& exact, const StreamLayout& L, double floor_at_least = 0);

// Whether the tensor's pad rows must be exactly 0 (pad_rows = masked, a row-indexed tensor).
bool pad_rows_zero(const std::string& name, const Shape& shape, const StreamLayout& L);

// compare_tensor after its pass: the verdict and figures from the pass's partial results (in
// element order; check/compare_partial.hpp), the values of single elements read through the
// callbacks (for the worst and the first failing element). An oracle that kept its outputs on a
// device (Oracle::compare_held) computes the partials there and finishes here.
using ValueAt = std::function<double(int64_t)>;
TensorCheck compare_from_partials(const std::string& name, const Shape& fused_shape, const Shape& exact_shape,
                                  const std::vector<ComparePartial>& parts, const StreamLayout& L,
                                  double floor_at_least, const ValueAt& fused, const ValueAt& exact,
                                  const ValueAt& lowp, bool have_fused, bool have_exact);

// The floor of the scalar loss L = coeff/N · Σ_g KL[g]. L's error is a sum of N row errors, so its
// lowp error e_l is a single draw that can cancel by luck (seen: fused 8.3e-9, lowp 3.7e-9, on an
// L of 5.2e-4 whose rows all agreed with lowp). Each row contributes what its own check allows
// beyond α·e_l: the lowp row's error and the KL's floor `kl_floor` (a row passes with an error up
// to that floor, so L must too: seen on the H200, one row 9.3x its e_l inside the KL floor made L
// fail at 3.7e-6 relative). Rows with keys add in root-sum-square, as independent errors do:
// coeff/N · sqrt(Σ_g (KL_lowp[g] − KL_exact[g])² + kl_floor²).
// It is ~1/√N of a row's allowance, so a wrong N or a dropped row still fails.
double loss_floor(const TensorD& kl_lowp, const TensorD& kl_exact, double coeff_over_N, double kl_floor,
                  const StreamLayout& L);

// The exact indexer score of every visible key of row g, I[g, key_begin + i] (SPEC.md §3).
struct ScoreRow {
  int64_t key_begin = 0;
  std::vector<double> scores;
};

// SPEC.md §4 equivalence of the backend's top-k ([Tp, K']) against the exact scores, δ = the score
// tolerance. exact_row(g) gives the exact scores of row g's visible keys. When `equivalent` is
// given it receives, per row, whether that row is a legal equivalent.
TensorCheck compare_topk(const TensorI& fused, int64_t width, const StreamLayout& L, double delta,
                         const std::function<ScoreRow(int64_t)>& exact_row,
                         std::vector<uint8_t>* equivalent = nullptr);

}  // namespace dsa
