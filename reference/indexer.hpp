// Indexer scores, top-k and the attention's key sets S(g) of one rank (SPEC.md §3–§5).
// Members of detail::Rank (rank.hpp), included by core.cpp only.
#pragma once

#include "reference/rank.hpp"
#include "reference/topk.hpp"

namespace dsa::detail {

// u[t, h] = k_I[key t] · q_I[g, h] for the given keys' k_I rows; scores I = φ(u)·w[g].
template <class P>
void Rank<P>::indexer_u(int64_t i, const Eigen::Ref<const Mat<R>>& kI, Eigen::Ref<Mat<R>> u) const {
  Eigen::Map<const Mat<R>> qI(q_I_.row(i).data(), d_.HI, d_.DI);
  u.noalias() = kI * qI.transpose();
}

template <class P>
auto Rank<P>::indexer_scores(int64_t i, const Eigen::Ref<const Mat<R>>& u) const -> Vec<R> {
  Vec<R> out(u.rows());
  for (int64_t t = 0; t < u.rows(); ++t) {
    R acc = 0;
    for (int64_t h = 0; h < d_.HI; ++h) acc += w_(i, h) * phi(u(t, h));
    out(t) = acc;
  }
  return out;
}

template <class P>
auto Rank<P>::visible_keys(int64_t g) const -> std::vector<int64_t> {
  std::vector<int64_t> keys;
  for (int64_t t = vis_.begin(g); t < vis_.end(g); ++t) keys.push_back(t);
  return keys;
}

template <class P>
int64_t Rank<P>::max_visible() const {
  int64_t most = 0;
  for (int64_t g : plan_.rows) most = std::max(most, vis_.end(g) - vis_.begin(g));
  return most;
}

template <class P>
void Rank<P>::indexer(RankOutput& out) {
  const bool want_scores = Tp_ * Tp_ <= opt_.max_score_elements;
  if (want_scores) out.scores = TensorD({Tq_, Tp_}, kNegInf);
  out.topk = TensorI({Tq_, Kw_}, -1);
  const int64_t most = max_visible();
#pragma omp parallel if (parallel_)
  {
    Buffer<R> kI_buf(most * d_.DI), u_buf(most * d_.HI);
#pragma omp for schedule(static, 1)
    for (int64_t i = 0; i < Tq_; ++i) {
      const int64_t g = plan_.rows[i];
      const auto keys = visible_keys(g);
      const int64_t n = static_cast<int64_t>(keys.size());
      const auto kI = key_rows(k_I_, keys, kI_buf);  // visible keys are one run: k_I's own rows
      auto u = u_buf.as(n, d_.HI);
      indexer_u(i, kI, u);
      const Vec<R> I = indexer_scores(i, u);
      std::vector<double> sc(I.data(), I.data() + I.size());
      const int64_t begin = keys.empty() ? 0 : keys.front();
      topk_canonical(sc.data(), n, begin, Kw_, out.topk.row(i), opt_.mutant);
      if (want_scores) std::copy(sc.begin(), sc.end(), out.scores.row(i) + begin);
    }
  }
  topk_ = &out.topk;
}

// S(g): the valid, visible keys of the attention's index row, as a sorted set (SPEC.md §5).
template <class P>
void Rank<P>::select_keys() {
  S_.assign(Tq_, {});
  int64_t most = 0;
#pragma omp parallel for schedule(static) reduction(max : most) if (parallel_)
  for (int64_t i = 0; i < Tq_; ++i) {
    const int64_t g = plan_.rows[i];
    const int32_t* row = opt_.attention_indices ? opt_.attention_indices->row(plan_.own_rows[i]) : topk_->row(i);
    const int64_t width = opt_.attention_indices ? opt_.attention_indices->row_size() : Kw_;
    auto& keys = S_[i];
    for (int64_t j = 0; j < width; ++j)
      if (int64_t t = vis_.attention_key(g, row[j]); t >= 0) keys.push_back(t);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    most = std::max(most, static_cast<int64_t>(keys.size()));
  }
  max_keys_ = most;
}

}  // namespace dsa::detail
