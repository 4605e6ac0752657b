#include "check/oracle_both.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "check/compare.hpp"
#include "check/magnitude.hpp"
#include "core/catalogue.hpp"

namespace dsa {

namespace {

std::string fmt(double x) {
  std::ostringstream s;
  s.precision(3);
  s << x;
  return s.str();
}

double max_abs_finite(const TensorD& t) {
  double m = 0;
  for (double x : t.data)
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return m;
}

// max|x − y| over the elements finite on both sides (at element `worst`); the first element where
// exactly one side is non-finite, or where both are but differ, is returned in `pattern` (−1 when none).
double max_abs_diff(const TensorD& x, const TensorD& y, int64_t& pattern, int64_t* worst = nullptr) {
  double e = 0;
  pattern = -1;
  for (size_t i = 0; i < x.data.size(); ++i) {
    const double a = x.data[i], b = y.data[i];
    if (std::isfinite(a) && std::isfinite(b)) {
      if (std::abs(a - b) > e) {
        e = std::abs(a - b);
        if (worst) *worst = static_cast<int64_t>(i);
      }
    } else if (pattern < 0 && !(a == b)) {
      pattern = static_cast<int64_t>(i);
    }
  }
  return e;
}

// The exact canonical top-k as sets per row (slot order is free): the first row that differs.
int64_t first_different_row(const TensorI& a, const TensorI& b) {
  if (a.shape != b.shape) return 0;
  const int64_t rows = a.shape.empty() ? 0 : a.shape[0], w = rows ? static_cast<int64_t>(a.data.size()) / rows : 0;
  std::vector<int32_t> x(w), y(w);
  for (int64_t g = 0; g < rows; ++g) {
    std::copy_n(a.row(g), w, x.begin());
    std::copy_n(b.row(g), w, y.begin());
    std::sort(x.begin(), x.end());
    std::sort(y.begin(), y.end());
    if (x != y) return g;
  }
  return -1;
}

void for_each_pair(const Result& a, const Result& b,
                   const std::function<void(const std::string&, const TensorD&, const TensorD&)>& f) {
  std::map<std::string, const TensorD*> other;
  b.for_each_float([&](const std::string& n, const TensorD& t) { other[n] = &t; });
  a.for_each_float([&](const std::string& n, const TensorD& t) {
    if (!t.data.empty() && other.count(n)) f(n, t, *other[n]);
  });
  if (a.scores && b.scores) f("scores", *a.scores, *b.scores);
}

}  // namespace

void merge_agreement(std::vector<OracleAgreement>& into, const std::vector<OracleAgreement>& from) {
  for (const OracleAgreement& x : from) {
    auto it = std::find_if(into.begin(), into.end(), [&](const OracleAgreement& y) { return y.tensor == x.tensor; });
    if (it == into.end()) {
      into.push_back(x);
      continue;
    }
    it->exact_rel = std::max(it->exact_rel, x.exact_rel);
    if (x.lowp_ratio > it->lowp_ratio) it->lowp_ratio = x.lowp_ratio, it->e_l_a = x.e_l_a, it->e_l_b = x.e_l_b;
    it->compared += x.compared;
    if (it->detail.empty()) it->detail = x.detail;
  }
  std::stable_sort(into.begin(), into.end(), [](const OracleAgreement& x, const OracleAgreement& y) {
    auto pos = [](const std::string& n) {
      const auto& all = catalogue();
      return std::find_if(all.begin(), all.end(), [&](const TensorSpec& s) { return s.name == n; }) - all.begin();
    };
    return pos(x.tensor) < pos(y.tensor);
  });
}

DualOracle::DualOracle(std::unique_ptr<Oracle> authority, std::unique_ptr<Oracle> second)
    : a_(std::move(authority)), b_(std::move(second)) {}

std::string DualOracle::name() const { return a_->name() + "+" + b_->name(); }

// Row recomputation is the authority's alone: the rows of materialized score matrices are
// compared in compute(); a row-by-row second opinion would double the cost of the largest cases.
std::vector<double> DualOracle::score_row(const PreparedCase& c, int64_t g, Precision precision) {
  return a_->score_row(c, g, precision);
}

OracleAgreement& DualOracle::slot(const std::string& tensor) {
  for (auto& s : seen_)
    if (s.tensor == tensor) return s;
  OracleAgreement a;
  a.tensor = tensor;
  seen_.push_back(std::move(a));
  return seen_.back();
}

double DualOracle::magnitude(const std::string& tensor, const TensorD& exact) const {
  const auto m = magnitudes_.find(tensor);
  return std::max(max_abs_finite(exact), m != magnitudes_.end() ? m->second : 0.0);
}

void DualOracle::record(const std::string& tensor, const TensorD& a, const TensorD& b) {
  OracleAgreement& s = slot(tensor);
  if (a.shape != b.shape) {
    if (s.detail.empty()) s.detail = "exact: shapes differ";
    return;
  }
  int64_t pattern = -1, worst = 0;
  const double scale = magnitude(tensor, a), e = max_abs_diff(a, b, pattern, &worst);
  const double rel = scale > 0 ? e / scale : (e > 0 ? INFINITY : 0);
  s.exact_rel = std::max(s.exact_rel, rel);
  s.compared += static_cast<int64_t>(a.data.size());
  if (pattern >= 0) {
    if (s.detail.empty())
      s.detail = "exact: non-finite values differ at element " + std::to_string(pattern) + " (" +
                 fmt(a.data[pattern]) + " vs " + fmt(b.data[pattern]) + ")";
    return;
  }
  // Judged once the authority's lowp error of the same stage is known (record_lowp).
  pending_[tensor] = Pending{e, scale, "at element " + std::to_string(worst) + ": A " + fmt(a.data[worst]) + ", B " +
                                           fmt(b.data[worst])};
}

void DualOracle::judge_exact(const std::string& tensor, double e_l_a) {
  auto it = pending_.find(tensor);
  if (it == pending_.end()) return;
  const Pending p = it->second;
  pending_.erase(it);
  OracleAgreement& s = slot(tensor);
  const double limit = std::max(kOracleExactRel * p.scale, kOracleExactOfLowp * e_l_a);
  if (p.e > limit && s.detail.empty())
    s.detail = "exact: max|B - A| = " + fmt(p.e) + " > " + fmt(limit) + " (1e-12 of M = " + fmt(p.scale) +
               ", 1e-6 of e_l(A) = " + fmt(e_l_a) + "), " + p.where;
}

void DualOracle::record_lowp(const std::string& tensor, const TensorD& x, const TensorD& a, const TensorD& b) {
  OracleAgreement& s = slot(tensor);
  if (a.shape != x.shape || b.shape != x.shape) {
    if (s.detail.empty()) s.detail = "lowp: shapes differ";
    return;
  }
  int64_t pa = -1, pb = -1;
  const double e_a = max_abs_diff(a, x, pa), e_b = max_abs_diff(b, x, pb);
  judge_exact(tensor, e_a);
  const double bound = std::max(e_a, kFloorRel * magnitude(tensor, x));
  const double ratio = bound > 0 ? e_b / bound : (e_b > 0 ? INFINITY : 0);
  if (ratio > s.lowp_ratio) s.lowp_ratio = ratio, s.e_l_a = e_a, s.e_l_b = e_b;
  if (!s.detail.empty()) return;
  if (pb >= 0 && pa < 0)
    s.detail = "lowp: non-finite where the exact value is finite, at element " + std::to_string(pb);
  else if (ratio > kOracleLowpFactor)
    s.detail = "lowp: e_l " + fmt(e_b) + " vs the authority's " + fmt(e_a) + " (ratio " + fmt(ratio) + " > " +
               fmt(kOracleLowpFactor) + ")";
}

Result DualOracle::compute(const PreparedCase& c, Precision precision, const StageRequest& req) {
  if (magnitudes_of_ != &c) {  // the case's magnitudes, once (a pass over its visible pairs)
    const StreamLayout& L = c.layout;
    const IndexerMagnitudes m = indexer_magnitudes(c.inputs, L);
    const LossGradMagnitudes g =
        loss_grad_magnitudes(m, c.problem.coeff / std::max<double>(1.0, static_cast<double>(L.counted_rows())));
    magnitudes_ = {{"scores", m.score}, {"dw", g.dw}, {"dq_I", g.dq_I}, {"dk_I", g.dk_I}};
    magnitudes_of_ = &c;
  }
  Result a = a_->run(c, precision, req);
  Result b = b_->run(c, precision, req);
  const auto key = std::make_pair(req.indexer, req.attention);
  if (precision == Precision::exact) {
    for_each_pair(a, b, [&](const std::string& n, const TensorD& x, const TensorD& y) { record(n, x, y); });
    if (req.indexer) {
      OracleAgreement& s = slot("topk");
      const int64_t g = first_different_row(a.topk, b.topk);
      s.compared += static_cast<int64_t>(a.topk.data.size());
      if (g >= 0 && s.detail.empty()) s.detail = "exact: the canonical top-k differs in row " + std::to_string(g);
    }
    exact_[key] = a;
  } else if (auto it = exact_.find(key); it != exact_.end()) {
    std::map<std::string, const TensorD*> truth;
    it->second.for_each_float([&](const std::string& n, const TensorD& t) { truth[n] = &t; });
    if (it->second.scores) truth["scores"] = &*it->second.scores;
    for_each_pair(a, b, [&](const std::string& n, const TensorD& x, const TensorD& y) {
      if (truth.count(n)) record_lowp(n, *truth[n], x, y);
    });
  }
  return a;
}

std::vector<OracleAgreement> DualOracle::take_agreement() {
  while (!pending_.empty()) judge_exact(pending_.begin()->first, 0);  // no lowp run of that stage
  std::vector<OracleAgreement> out;
  merge_agreement(out, seen_);
  seen_.clear();
  exact_.clear();
  pending_.clear();
  return out;
}

}  // namespace dsa
