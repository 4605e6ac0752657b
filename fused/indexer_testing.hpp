// Helpers of the fused kernel tests: device buffers with NaN-poisoned guard regions, bf16 uploads,
// the CPU reference's inputs (generated here, not through reference/test_util.hpp), and the glue
// to check/compare.hpp: every comparison of a fused output goes through compare_tensor or
// compare_topk (SPEC.md §9), never a tolerance of the tests' own.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <bit>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "check/compare.hpp"
#include "core/bf16.hpp"
#include "core/inputs.hpp"
#include "core/inputs_testing.hpp"
#include "core/layout.hpp"
#include "core/problem.hpp"
#include "core/result.hpp"
#include "core/tensor.hpp"
#include "fused/api.cuh"
#include "fused/device.hpp"

namespace dsa::fused::testing {

#define DSA_SKIP_WITHOUT_GPU()                                                                 \
  if (dsa::fused::device_count() == 0)                                                         \
  GTEST_SKIP() << "no CUDA device here: the fused kernel tests run for real on the device machine"

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A device array of n elements with `guard` elements on each side, which hold `fill` (NaN for
// key buffers: a kernel that reads slot −1 or Tp without a check turns an output into NaN).
template <class T>
struct DeviceArray {
  T* base = nullptr;
  T* p = nullptr;
  size_t n = 0;
  DeviceArray(size_t count, T fill, size_t guard = 256) : n(count) {
    check_cuda(cudaMalloc(&base, (count + 2 * guard) * sizeof(T) + 1), "cudaMalloc");
    std::vector<T> h(count + 2 * guard, fill);
    check_cuda(cudaMemcpy(base, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
    p = base + guard;
  }
  template <class A>
  DeviceArray(const std::vector<T, A>& v, T fill, size_t guard = 256) : DeviceArray(v.size(), fill, guard) {
    if (!v.empty()) check_cuda(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(base); }
  std::vector<T> download() const {
    std::vector<T> h(n);
    if (n) check_cuda(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
};

inline bf16 bf16_nan() { return __float2bfloat16(std::numeric_limits<float>::quiet_NaN()); }
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A tensor's values (already bf16 numbers) as bf16; rows listed in `poison_rows` become NaN.
inline std::vector<bf16> to_bf16(const TensorD& t, const std::vector<int64_t>& poison_rows = {}) {
  std::vector<bf16> v(t.data.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = __float2bfloat16(static_cast<float>(t.data[i]));
  for (int64_t r : poison_rows)
    for (int64_t j = 0; j < t.row_size(); ++j) v[r * t.row_size() + j] = bf16_nan();
  return v;
}

// Sets a spread-out `fraction` of k_I rows to 0: u = 0 exactly there (score ties at 0, φ'(0)).
inline void zero_k_I_rows(Inputs& in, double fraction) {
  for (int64_t t = 0; t < in.k_I.dim(0); ++t)
    if (std::fmod(t * 0.618034, 1.0) < fraction)
      for (int64_t j = 0; j < in.k_I.dim(1); ++j) in.k_I.at(t, j) = 0.0;
}

// Key rows no query may see: pad rows under pad_rows = masked (SPEC.md §10 poison).
inline std::vector<int64_t> invisible_rows(const StreamLayout& L) {
  std::vector<int64_t> rows;
  for (int64_t t = 0; t < L.tp; ++t) {
    bool seen = false;
    for (int64_t g = 0; g < L.tp && !seen; ++g) seen = L.visible(g, t);
    if (!seen) rows.push_back(t);
  }
  return rows;
}

// Row ranges of one rank's local rows (global rows `rows`, in local order) on the device.
struct DeviceRows {
  DeviceArray<int32_t> global, begin, end;
  DeviceRows(const StreamLayout& L, const std::vector<int64_t>& rows)
      : global(field(L, rows, 0), 0), begin(field(L, rows, 1), 0), end(field(L, rows, 2), 0) {}
  RowRanges view() const { return {global.p, begin.p, end.p}; }
  static std::vector<int32_t> field(const StreamLayout& L, const std::vector<int64_t>& rows, int which) {
    std::vector<int32_t> v(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t g = rows[i];
      v[i] = static_cast<int32_t>(which == 0 ? g : which == 1 ? L.key_begin(g) : L.key_end(g));
    }
    return v;
  }
};

// Rows `rows` of a [T, ...] tensor, in that order (a rank's local view of query-side tensors).
template <class T>
Tensor<T> gather_rows(const Tensor<T>& t, const std::vector<int64_t>& rows) {
  Shape s = t.shape;
  s[0] = static_cast<int64_t>(rows.size());
  Tensor<T> out(s);
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy(t.row(rows[i]), t.row(rows[i]) + t.row_size(), out.row(static_cast<int64_t>(i)));
  return out;
}

// ---- inputs (SPEC.md §8: generated in fp64, rounded once to bf16) ----

using dsa::test_inputs::input_sigma;
using dsa::test_inputs::layout_of;
using dsa::test_inputs::random_inputs;
using dsa::test_inputs::small_problem;
using dsa::test_inputs::tiny_dims;

// ---- device values back into catalogue-shaped tensors ----

// Device output buffers are poisoned with all-one bytes (core/result.hpp) before a kernel runs.
inline constexpr uint16_t kPoisonBf16 = 0xFFFFu;
inline float poison_f32() { return std::bit_cast<float>(0xFFFFFFFFu); }

// fp32 values (as a kernel wrote them) as a tensor of `shape`; the poison pattern stays visible
// as unwritten_value(), so compare_tensor reports "unwritten", not just "nan".
inline TensorD tensor_of(const Shape& shape, const std::vector<float>& v) {
  TensorD t(shape);
  if (static_cast<size_t>(t.size()) != v.size())
    throw std::runtime_error("tensor_of: " + std::to_string(v.size()) + " values for shape " + shape_str(shape));
  for (size_t i = 0; i < v.size(); ++i)
    t.data[i] = is_poison_bits(std::bit_cast<uint32_t>(v[i])) ? unwritten_value() : static_cast<double>(v[i]);
  return t;
}

// bf16 bit patterns (as a kernel wrote them) as a tensor of `shape`.
inline TensorD tensor_of_bf16(const Shape& shape, const std::vector<uint16_t>& v) {
  TensorD t(shape);
  if (static_cast<size_t>(t.size()) != v.size())
    throw std::runtime_error("tensor_of_bf16: " + std::to_string(v.size()) + " values for shape " + shape_str(shape));
  for (size_t i = 0; i < v.size(); ++i)
    t.data[i] = is_poison_bits(v[i]) ? unwritten_value() : static_cast<double>(bf16_float(v[i]));
  return t;
}

// fp32 values rounded to bf16 the way the host API writes a bf16 output (poison kept).
inline std::vector<float> bf16_rounded(std::vector<float> v) {
  for (float& x : v)
    if (!is_poison_bits(std::bit_cast<uint32_t>(x))) x = round_bf16(x);
  return v;
}

// ---- the comparison: check/compare.hpp only ----

// A TensorCheck as a gtest assertion: pass iff status == pass, with compare_tensor's own detail.
inline ::testing::AssertionResult passes(const TensorCheck& r, const std::string& context = "") {
  if (r.status == CheckStatus::pass && r.compared > 0)
    return ::testing::AssertionSuccess() << r.tensor << ": e_f " << r.e_f << " e_l " << r.e_l;
  std::ostringstream os;
  os << (context.empty() ? "" : context + ": ") << r.tensor << " "
     << (r.status == CheckStatus::pass ? "compared no element" : r.status == CheckStatus::fail ? "FAILS" : "not checked")
     << ": " << r.detail << " (e_f " << r.e_f << ", e_l " << r.e_l << ", alpha " << r.alpha << ", floor " << r.floor
     << ", ratio " << r.ratio << ", compared " << r.compared;
  if (r.worst) os << ", worst fused " << r.worst_fused << " exact " << r.worst_exact << " lowp " << r.worst_lowp;
  os << ")";
  return ::testing::AssertionFailure() << os.str();
}

// compare_tensor(name, fused, lowp, exact, L) of SPEC.md §9 on a fused tensor given as device
// values in exact's shape. `name` is the catalogue tensor (it sets α and the pad-row rule).
inline ::testing::AssertionResult parity(const std::string& name, const std::vector<float>& fused, const TensorD& exact,
                                         const TensorD& lowp, const StreamLayout& L, const std::string& context = "") {
  if (fused.size() != static_cast<size_t>(exact.size()))
    return ::testing::AssertionFailure() << context << " " << name << ": " << fused.size() << " values, exact has "
                                         << exact.size();
  return passes(compare_tensor(name, tensor_of(exact.shape, fused), lowp, exact, L), context);
}

// The top-k score tolerance of SPEC.md §9 as check/judge.cpp computes it: δ = 2·e_l(I) + kFloorRel·
// max|I_exact|, e_l(I) and the max over every visible (finite) pair.
inline double topk_delta(const TensorD& lowp_scores, const TensorD& exact_scores, const StreamLayout& L) {
  double e_l = 0, scale = 0;
  for (int64_t g = 0; g < L.tp; ++g)
    for (int64_t t = L.key_begin(g); t < L.key_end(g); ++t) {
      const double x = exact_scores.row(g)[t], l = lowp_scores.row(g)[t];
      if (!std::isfinite(x) || !std::isfinite(l)) continue;
      e_l = std::max(e_l, std::abs(l - x));
      scale = std::max(scale, std::abs(x));
    }
  return 2 * e_l + kFloorRel * scale;
}

// compare_topk of the fused top-k [Tp, K'] against the exact scores [Tp, Tp].
inline ::testing::AssertionResult topk_passes(const std::vector<int32_t>& fused, int64_t width, const TensorD& exact_scores,
                                              const TensorD& lowp_scores, const StreamLayout& L,
                                              const std::string& context = "") {
  TensorI t({L.tp, width});
  if (fused.size() != t.data.size())
    return ::testing::AssertionFailure() << context << " topk: " << fused.size() << " values for [" << L.tp << ", "
                                         << width << "]";
  t.data.assign(fused.begin(), fused.end());
  const double delta = topk_delta(lowp_scores, exact_scores, L);
  auto exact_row = [&](int64_t g) {
    ScoreRow r{L.key_begin(g), {}};
    r.scores.assign(exact_scores.row(g) + L.key_begin(g), exact_scores.row(g) + L.key_end(g));
    return r;
  };
  return passes(compare_topk(t, width, L, delta, exact_row), context);
}

}  // namespace dsa::fused::testing
