// The per-element step of the one comparison (check/compare.hpp): what a run of consecutive
// elements of (fused, lowp, exact) contributes to a tensor's figures. compare_tensor folds it over
// chunks on the CPU's threads; the GPU oracle folds the same step over tensors it kept on its
// device (check/gpu/compare_held.cu). Merging partials in element order gives the serial pass's
// first and worst positions whatever the split, so both give one verdict.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/host_device.hpp"
#include "core/result.hpp"

namespace dsa {

struct ComparePartial {
  int64_t first_unwritten = -1, first_nan = -1, first_inf = -1, first_pad = -1, worst = -1;
  int64_t compared = 0, finite = 0;
  double scale = 0, e_f = 0, e_l = 0, max_rel = 0, sq = 0, dot = 0, nf = 0, nx = 0;
};

namespace compare_detail {
DSA_HD inline bool is_nan(double v) { return std::isnan(v); }
DSA_HD inline bool is_inf(double v) { return std::isinf(v); }
DSA_HD inline double abs(double v) { return std::fabs(v); }
DSA_HD inline double max(double a, double b) { return a < b ? b : a; }
DSA_HD inline uint64_t bits(double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}
DSA_HD inline void first(int64_t& at, int64_t candidate) {
  if (candidate >= 0 && (at < 0 || candidate < at)) at = candidate;
}
}  // namespace compare_detail

// Element i: fused f, exact x, lowp l (have_lowp false: no lowp value). pad_row: the element is
// in a masked pad row, which must be exactly 0.
DSA_HD inline void compare_element(ComparePartial& p, int64_t i, double f, double x, double l, bool have_lowp,
                                   bool pad_row) {
  using namespace compare_detail;
  if (bits(f) == kUnwrittenBits) {
    if (p.first_unwritten < 0) p.first_unwritten = i;
    return;
  }
  if (pad_row && !is_nan(x) && !is_inf(x) && f != 0 && p.first_pad < 0) p.first_pad = i;
  if (is_nan(x)) return;  // the exact oracle never yields NaN; nothing to compare against
  if (is_inf(x)) {
    if (f != x && p.first_inf < 0) p.first_inf = i;
    if (f == x) ++p.compared;
    return;
  }
  if (is_nan(f)) {
    if (p.first_nan < 0) p.first_nan = i;
    return;
  }
  if (is_inf(f)) {
    if (p.first_inf < 0) p.first_inf = i;
    return;
  }
  ++p.compared;
  ++p.finite;
  p.scale = max(p.scale, abs(x));
  const double err = abs(f - x);
  if (p.worst < 0 || err > p.e_f) p.e_f = err, p.worst = i;
  if (have_lowp && !is_nan(l) && !is_inf(l)) p.e_l = max(p.e_l, abs(l - x));
  if (x != 0) p.max_rel = max(p.max_rel, err / abs(x));
  p.sq += err * err;
  p.dot += f * x;
  p.nf += f * f;
  p.nx += x * x;
}

// Folds b (elements after a's, or interleaved with them) into a: first positions are the
// smallest, the worst is the largest error at its smallest position.
DSA_HD inline void merge(ComparePartial& a, const ComparePartial& b) {
  using namespace compare_detail;
  first(a.first_unwritten, b.first_unwritten), first(a.first_nan, b.first_nan), first(a.first_inf, b.first_inf);
  first(a.first_pad, b.first_pad);
  if (b.worst >= 0 && (a.worst < 0 || b.e_f > a.e_f || (b.e_f == a.e_f && b.worst < a.worst)))
    a.e_f = b.e_f, a.worst = b.worst;
  a.compared += b.compared, a.finite += b.finite;
  a.scale = max(a.scale, b.scale), a.e_l = max(a.e_l, b.e_l), a.max_rel = max(a.max_rel, b.max_rel);
  a.sq += b.sq, a.dot += b.dot, a.nf += b.nf, a.nx += b.nx;
}

}  // namespace dsa
