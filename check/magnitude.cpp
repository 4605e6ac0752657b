#include "check/magnitude.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dsa {

namespace {

double norm2(const double* v, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += v[i] * v[i];
  return std::sqrt(s);
}

// Range maxima of v in O(1) per query after O(n log n) (a sparse table).
class RangeMax {
 public:
  explicit RangeMax(std::vector<double> v) {
    levels_.push_back(std::move(v));
    const size_t n = levels_[0].size();
    for (size_t w = 1; 2 * w <= n; w *= 2) {
      const std::vector<double>& prev = levels_.back();
      std::vector<double> next(n - 2 * w + 1);
      for (size_t i = 0; i < next.size(); ++i) next[i] = std::max(prev[i], prev[i + w]);
      levels_.push_back(std::move(next));
    }
  }
  // max of v[b, e), b < e
  double operator()(int64_t b, int64_t e) const {
    const size_t len = static_cast<size_t>(e - b);
    size_t k = 0;
    while ((size_t{2} << k) <= len) ++k;
    return std::max(levels_[k][b], levels_[k][e - (int64_t{1} << k)]);
  }

 private:
  std::vector<std::vector<double>> levels_;
};

// ‖k_I[t]‖ of every key, 0 where not finite (a poisoned pad key nobody sees).
RangeMax key_norms(const Inputs& in, int64_t tp, int64_t DI) {
  std::vector<double> key(static_cast<size_t>(tp));
  for (int64_t t = 0; t < tp; ++t) {
    const double n = norm2(in.k_I.row(t), DI);
    key[t] = std::isfinite(n) ? n : 0.0;
  }
  return RangeMax(std::move(key));
}

}  // namespace

IndexerMagnitudes indexer_magnitudes(const Inputs& in, const StreamLayout& L) {
  const int64_t tp = L.tp;
  if (tp == 0 || in.q_I.shape.size() != 3) return {};
  const int64_t HI = in.q_I.shape[1], DI = in.q_I.shape[2];
  const RangeMax key_max = key_norms(in, tp, DI);
  double score = 0, q_k = 0, w_k = 0, w_q = 0;
#pragma omp parallel for schedule(static) reduction(max : score, q_k, w_k, w_q) if (tp * HI * DI > (int64_t{1} << 18))
  for (int64_t g = 0; g < tp; ++g) {
    const int64_t b = L.key_begin(g), e = L.key_end(g);
    if (b >= e) continue;
    const double k = key_max(b, e);
    double q_max = 0, w_max = 0, row = 0;  // row: Σ_h |w[g,h]|·‖q_I[g,h]‖
    for (int64_t h = 0; h < HI; ++h) {
      const double q = norm2(in.q_I.row(g) + h * DI, DI), w = std::fabs(in.w.row(g)[h]);
      q_max = std::max(q_max, q), w_max = std::max(w_max, w), row += w * q;
    }
    if (std::isfinite(row)) score = std::max(score, row * k), w_q = std::max(w_q, row);
    if (std::isfinite(q_max * k)) q_k = std::max(q_k, q_max * k);
    if (std::isfinite(w_max * k)) w_k = std::max(w_k, w_max * k);
  }
  return {score, q_k, w_k, w_q};
}

double indexer_score_magnitude(const Inputs& in, const StreamLayout& L) { return indexer_magnitudes(in, L).score; }

double kl_magnitude(const TensorD& kl_exact, const StreamLayout& L) {
  double m = 0;
  const int64_t rows = std::min<int64_t>(kl_exact.size(), L.tp);
  for (int64_t g = 0; g < rows; ++g) {
    const double kl = kl_exact.data[g];
    const int64_t n = L.key_end(g) - L.key_begin(g);
    if (std::isfinite(kl) && n > 0) m = std::max(m, std::fabs(kl) + 2 * std::log(double(n)));
  }
  return m;
}

LossGradMagnitudes loss_grad_magnitudes(const IndexerMagnitudes& m, double coeff_over_N) {
  const double s = 2 * std::fabs(coeff_over_N);
  return {s * m.q_k, s * m.w_k, s * m.w_q};
}

}  // namespace dsa
