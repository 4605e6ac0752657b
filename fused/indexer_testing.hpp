// Helpers of the indexer / top-k / loss kernel tests: device buffers with NaN-poisoned guard
// regions, bf16 uploads, the CPU references' inputs, and the SPEC.md §9 parity rule
// e_f ≤ α·e_l + floor (floor = 1e-6·max|exact|, the harness's kFloorRel).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "fused/api.cuh"
#include "fused/device.hpp"
#include "core/inputs.hpp"
#include "core/layout.hpp"
#include "core/tensor.hpp"

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
  DeviceArray(const std::vector<T>& v, T fill, size_t guard = 256) : DeviceArray(v.size(), fill, guard) {
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

// SPEC.md §9 on one tensor: same ±inf positions, no NaN where exact is finite, and
// max|fused − exact| ≤ α·max|lowp − exact| + 1e-6·max|exact| over the finite elements.
template <class F>
::testing::AssertionResult parity(const std::string& what, const std::vector<F>& fused, const TensorD& exact,
                                  const TensorD& lowp, double alpha) {
  if (fused.size() != exact.data.size() || lowp.data.size() != exact.data.size())
    return ::testing::AssertionFailure() << what << ": size " << fused.size() << " vs " << exact.data.size();
  double e_f = 0, e_l = 0, amax = 0;
  int64_t worst = -1;
  for (size_t i = 0; i < fused.size(); ++i) {
    const double f = static_cast<double>(fused[i]), x = exact.data[i], l = lowp.data[i];
    if (std::isinf(x) || std::isinf(f)) {
      if (f != x) return ::testing::AssertionFailure() << what << "[" << i << "] = " << f << ", exact " << x << " (inf pattern)";
      continue;
    }
    if (std::isnan(x)) continue;
    if (std::isnan(f)) return ::testing::AssertionFailure() << what << "[" << i << "] is NaN, exact " << x;
    amax = std::max(amax, std::abs(x));
    e_l = std::max(e_l, std::abs(l - x));
    if (std::abs(f - x) > e_f) e_f = std::abs(f - x), worst = static_cast<int64_t>(i);
  }
  const double bound = alpha * e_l + 1e-6 * amax;
  if (e_f <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": e_f " << e_f << " at [" << worst << "] (fused "
                                       << static_cast<double>(fused[worst]) << ", exact " << exact.data[worst]
                                       << ") > " << alpha << "·e_l " << e_l << " + floor " << 1e-6 * amax;
}

// max|lowp − exact| over finite elements.
inline double max_err(const TensorD& lowp, const TensorD& exact) {
  double e = 0;
  for (size_t i = 0; i < exact.data.size(); ++i)
    if (std::isfinite(exact.data[i])) e = std::max(e, std::abs(lowp.data[i] - exact.data[i]));
  return e;
}

}  // namespace dsa::fused::testing
