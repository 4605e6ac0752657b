#include "check/repeats.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace dsa {

namespace {

struct Diff {
  int64_t differing = 0;
  double spread = 0;
  bool shape_changed = false;
};

template <class T>
Diff diff(const TensorData<T>& a, const TensorData<T>& b) {
  Diff d;
  if (a.size() != b.size()) {
    d.shape_changed = true;
    return d;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) == 0) continue;
    ++d.differing;
    const double x = double(a[i]), y = double(b[i]);
    if (std::isfinite(x) && std::isfinite(y)) d.spread = std::max(d.spread, std::abs(x - y));
    else d.spread = INFINITY;  // a value turned non-finite (or back): no tolerance covers that
  }
  return d;
}

Diff diff_of(const Result& a, const Result& b, const std::string& name) {
  if (name == "topk") return diff(a.topk.data, b.topk.data);
  if (name == "scores") {
    if (!a.scores || !b.scores) return Diff{0, 0, a.scores.has_value() != b.scores.has_value()};
    return diff(a.scores->data, b.scores->data);
  }
  const TensorD *x = nullptr, *y = nullptr;
  a.for_each_float([&](const std::string& n, const TensorD& t) { if (n == name) x = &t; });
  b.for_each_float([&](const std::string& n, const TensorD& t) { if (n == name) y = &t; });
  if (!x || !y) return Diff{0, 0, x != y};
  return diff(x->data, y->data);
}

std::string fmt3(double x) {
  std::ostringstream s;
  s.precision(3);
  s << x;
  return s.str();
}

}  // namespace

void check_repeat(CaseVerdict& v, const Result& first, const Result& again, const std::vector<std::string>& deterministic) {
  for (TensorCheck& ch : v.checks) {
    if (ch.status == CheckStatus::not_checked) continue;
    if (!ch.repeat) {
      ch.repeat.emplace();
      ch.repeat->deterministic =
          std::find(deterministic.begin(), deterministic.end(), ch.tensor) != deterministic.end();
    }
    TensorCheck::Repeat& r = *ch.repeat;
    ++r.runs;
    const Diff d = diff_of(first, again, ch.tensor);
    r.differing = std::max(r.differing, d.differing);
    r.spread = std::max(r.spread, d.shape_changed ? INFINITY : d.spread);
    // The top-k has no tolerance of its own here: another legal selection is judged by the first
    // run's equivalence test only when the backend does not claim its bits.
    const double tolerance = ch.alpha * ch.e_l + ch.floor;
    r.spread_ratio = tolerance > 0 ? r.spread / tolerance : (r.spread > 0 ? INFINITY : 0);
    std::string why;
    if (d.shape_changed)
      why = "run " + std::to_string(r.runs) + " produced a different shape or left the tensor out";
    else if (r.deterministic && d.differing > 0)
      why = "declared deterministic, but " + std::to_string(d.differing) + " elements changed bits in run " +
            std::to_string(r.runs) + " (max |run_k - run_1| " + fmt3(d.spread) + ")";
    else if (!r.deterministic && ch.tensor != "topk" && r.spread_ratio > 1)
      why = "run-to-run spread " + fmt3(r.spread) + " exceeds the tolerance alpha*e_l + floor = " + fmt3(tolerance) +
            " (run " + std::to_string(r.runs) + ")";
    if (why.empty() || ch.failed()) continue;
    ch.status = CheckStatus::fail;
    ch.failure = Failure::nondeterministic;
    ch.detail = why;
  }
  // The primary failure stays the first failing check in stage order.
  if (v.verdict == Verdict::pass)
    for (const TensorCheck& ch : v.checks)
      if (ch.failed()) {
        v.verdict = Verdict::fail;
        v.stage = ch.stage;
        v.tensor = ch.tensor;
        v.failure = ch.failure;
        v.message = ch.tensor + ": " + ch.detail;
        break;
      }
}

}  // namespace dsa
