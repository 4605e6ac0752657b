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

bool declared(const std::vector<std::string>& deterministic, const std::string& tensor) {
  return std::find(deterministic.begin(), deterministic.end(), tensor) != deterministic.end();
}

std::string fmt3(double x) {
  std::ostringstream s;
  s.precision(3);
  s << x;
  return s.str();
}

}  // namespace

bool selection_changed(const Result& first, const Result& again, const std::vector<std::string>& deterministic) {
  if (declared(deterministic, "topk")) return false;
  const Diff d = diff(first.topk.data, again.topk.data);
  return !d.shape_changed && d.differing > 0;
}

void check_repeat(CaseVerdict& v, const Result& first, const Result& again, const std::vector<std::string>& deterministic,
                  const CaseVerdict* own, bool selection_feeds_attention) {
  int run = 2;  // k: this run, as the checks count it
  for (TensorCheck& ch : v.checks) {
    if (ch.status == CheckStatus::not_checked) continue;
    if (!ch.repeat) {
      ch.repeat.emplace();
      ch.repeat->deterministic = declared(deterministic, ch.tensor);
    }
    TensorCheck::Repeat& r = *ch.repeat;
    run = ++r.runs;
    if (own) ++r.rejudged;
    // After the indexer (the catalogue's stage) it ran on other keys: its own judgment covers it.
    if (own && selection_feeds_attention && ch.stage != Stage::indexer) continue;
    const Diff d = diff_of(first, again, ch.tensor);
    r.differing = std::max(r.differing, d.differing);
    r.spread = std::max(r.spread, d.shape_changed ? INFINITY : d.spread);
    // The top-k has no tolerance of its own here: another selection is judged on its own (`own`).
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
  const std::string prefix = "run " + std::to_string(run) + " (another selection): ";
  if (own) {
    for (const TensorCheck& o : own->checks) {
      if (!o.failed()) continue;
      for (TensorCheck& ch : v.checks)
        if (ch.tensor == o.tensor && !ch.failed()) {
          ch.status = CheckStatus::fail;
          ch.failure = o.failure;
          ch.detail = prefix + o.detail;
        }
    }
    v.oracle_s += own->oracle_s;
    v.compare_s += own->compare_s;
    v.oracle_stages += own->oracle_stages;
    merge_agreement(v.oracle_agreement, own->oracle_agreement);
  }
  // The primary failure stays the first failing check in stage order; a failure outranks a case
  // left unjudged by an earlier run.
  if (v.verdict != Verdict::fail)
    for (const TensorCheck& ch : v.checks)
      if (ch.failed()) {
        v.verdict = Verdict::fail;
        v.stage = ch.stage;
        v.tensor = ch.tensor;
        v.failure = ch.failure;
        v.message = ch.tensor + ": " + ch.detail;
        break;
      }
  // A run that could not be judged leaves the case unjudged, never passed; a failure of its own
  // that no check of v holds (a tensor the first run left out) is the case's.
  if (own && own->verdict != Verdict::pass && v.verdict != Verdict::fail &&
      (v.verdict == Verdict::pass || own->failed())) {
    v.verdict = own->verdict;
    v.stage = own->stage;
    v.tensor = own->tensor;
    v.failure = own->failure;
    v.message = prefix + own->message;
  }
}

}  // namespace dsa
