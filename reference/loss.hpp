// The indexer KL loss of one rank: dense, sparse and streaming sparse, forward and backward (SPEC.md §7).
// Members of detail::Rank (rank.hpp), included by core.cpp only.
#pragma once

#include <optional>

#include "reference/rank.hpp"

namespace dsa::detail {

template <class P>
void Rank<P>::loss(RankOutput& out) {
  out.kl = TensorD({Tq_});
  out.dq_I = TensorD({Tq_, d_.HI, d_.DI});
  out.dw = TensorD({Tq_, d_.HI});
  out.dk_I = TensorD({Tq_, d_.DI});
  if (p_.loss == LossMode::off) return;

  int64_t counted_local = 0;
  for (int64_t g : plan_.rows) counted_local += L_.active(g) ? 1 : 0;
  double counted[1] = {static_cast<double>(counted_local)};
  if (opt_.mutant == Mutant::loss_count_rank_left_out && plan_.comm && plan_.comm->size() > 1 &&
      plan_.comm->rank() == plan_.comm->size() - 1)
    counted[0] = 0;
  all_reduce(counted, 1);
  double N = std::max(1.0, counted[0]);
  if (opt_.mutant == Mutant::loss_per_rank_mean)
    N = std::max<double>(1.0, static_cast<double>(counted_local)) * (plan_.comm ? plan_.comm->size() : 1);
  const R scale = static_cast<R>(p_.coeff / N);

  const bool sparse = p_.loss == LossMode::sparse;
  const bool streaming = sparse && opt_.streaming_kl;
  const int64_t chunk = std::max<int64_t>(1, opt_.kl_chunk_rows);
  const int64_t last_chunk_begin = (Tq_ - 1) / chunk * chunk;
  const int nthreads = parallel_ ? omp_get_max_threads() : 1;
  std::vector<Held<R>> dkI;
  for (int t = 0; t < nthreads; ++t) dkI.push_back(Held<R>::zero(Tp_, d_.DI));
  Held<R> dqI = Held<R>::zero(Tq_, d_.HI * d_.DI), dw = Held<R>::zero(Tq_, d_.HI);
  Vec<R> kl = Vec<R>::Zero(Tq_);
  // The exact run's kink slack (SPEC.md §9, core/result.hpp KinkSlack): per thread, the largest
  // (row, head) sum and the per-key sums.
  const bool kinks = !P::rounds && p_.relu;
  std::vector<double> kink_rows(nthreads, 0.0);
  std::vector<std::vector<double>> kink_keys(nthreads, std::vector<double>(kinks ? Tp_ : 0, 0.0));

  // The streaming form walks chunks of rows; each row's work is independent, so the chunk is
  // only a bound on live memory here. Its A_h reuses the attention's lse instead of a softmax.
  const int64_t most = sparse ? max_keys_ : max_visible();
  std::optional<TraceSpan> span(std::in_place, "reference: loss rows");
#pragma omp parallel if (parallel_)
  {
    const int tid = omp_get_thread_num();
    Buffer<R> K_buf(most * CR_), A_buf(d_.H * most), kI_buf(most * d_.DI), u_buf(most * d_.HI),
        du_buf(most * d_.HI), dk_buf(most * d_.DI);
    for (int64_t c0 = 0; c0 < Tq_; c0 += chunk) {
      if (streaming && opt_.mutant == Mutant::streaming_kl_drop_last_chunk && c0 == last_chunk_begin) break;
      const int64_t c1 = streaming ? std::min(Tq_, c0 + chunk) : Tq_;
#pragma omp for schedule(static, 1)
      for (int64_t i = c0; i < c1; ++i) {
        const int64_t g = plan_.rows[i];
        if (!L_.active(g)) continue;
        const std::vector<int64_t> keys = sparse ? S_[i] : visible_keys(g);
        if (keys.empty()) continue;
        const int64_t n = static_cast<int64_t>(keys.size());
        const auto K = key_rows(Kt_, keys, K_buf);
        auto A = A_buf.as(d_.H, n);  // the logits, then A_h in place
        logits(i, keys, K, A);
        for (int64_t h = 0; h < d_.H; ++h) {
          const R norm = streaming ? lse_(i, h) : row_lse(A.row(h).transpose());
          A.row(h) = P::exp(A.row(h).array() - norm);
        }
        Vec<R> T = A.colwise().sum().transpose();
        T /= std::max(T.sum(), R(1e-10));

        const auto kI = key_rows(k_I_, keys, kI_buf);
        auto u = u_buf.as(n, d_.HI);
        indexer_u(i, kI, u);
        const Vec<R> I = indexer_scores(i, u);
        const Vec<R> logQ = I.array() - row_lse(I);
        const Vec<R> Q = P::exp(logQ.array());
        Vec<R> dI(n);
        if (opt_.mutant == Mutant::kl_reversed) {
          // KL(Q‖T) = Σ Q (logQ − log T) and its gradient Q·(a − KL), a = logQ − log T.
          Vec<R> a(n);
          for (int64_t t = 0; t < n; ++t) a(t) = logQ(t) - std::log(std::max(T(t), R(1e-10)));
          kl(i) = Q.dot(a);
          dI = scale * (Q.array() * (a.array() - kl(i))).matrix();
        } else {
          R acc = 0;
          for (int64_t t = 0; t < n; ++t)
            if (T(t) > 0) acc += T(t) * (std::log(std::max(T(t), R(1e-10))) - logQ(t));
          kl(i) = acc;
          dI = scale * (Q - T);
        }

        // dw = Σ_t dI·φ(u); du = dI·w·φ'(u), the operand of dq_I = duᵀ·k_I and dk_I = du·q_I.
        Eigen::Map<const Mat<R>> qI(q_I_.row(i).data(), d_.HI, d_.DI);
        auto du = du_buf.as(n, d_.HI);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t h = 0; h < d_.HI; ++h) {
            dw(i, h) += dI(t) * phi(u(t, h));
            du(t, h) = P::bf(dI(t) * w_(i, h) * dphi(u(t, h)));
          }
        if (kinks) kink_terms(i, keys, u, dI, qI, kI, kink_rows[tid], kink_keys[tid]);
        Eigen::Map<Mat<R>>(dqI.row(i).data(), d_.HI, d_.DI).noalias() = du.transpose() * kI;
        auto dk = dk_buf.as(n, d_.DI);
        dk.noalias() = du * qI;
        for (int64_t t = 0; t < n; ++t) dkI[tid].row(keys[t]) += dk.row(t);
      }
      if (!streaming) break;
    }
  }
  span.emplace("reference: loss sums, outputs");
  for (int t = 1; t < nthreads; ++t) dkI[0] += dkI[t];

  // Each rank contributes coeff·Σ KL / N; with the global N the contributions sum to L.
  double contrib[1] = {p_.coeff * static_cast<double>(kl.template cast<double>().sum()) / N};
  all_reduce(contrib, 1);
  out.loss = static_cast<double>(static_cast<R>(contrib[0]));
  if (kinks) {
    // Keys: summed over threads and ranks (every rank sees the keys in the same gathered order);
    // rows: the largest over threads, then over ranks.
    for (int t = 1; t < nthreads; ++t)
      for (int64_t k = 0; k < Tp_; ++k) kink_keys[0][k] += kink_keys[t][k];
    all_reduce(kink_keys[0].data(), Tp_);
    const double rows = all_max({*std::max_element(kink_rows.begin(), kink_rows.end())})[0];
    out.kink = KinkSlack{rows, Tp_ ? *std::max_element(kink_keys[0].begin(), kink_keys[0].end()) : 0.0};
  }
  bf_inplace<P>(dqI);
  bf_inplace<P>(dw);
  out.kl = to_tensor<R>(kl.transpose(), {Tq_});
  out.dq_I = to_tensor<R>(dqI, {Tq_, d_.HI, d_.DI});
  out.dw = to_tensor<R>(dw, {Tq_, d_.HI});
  out.dk_I = round_out(reduce_scatter_keys(dkI[0]));
}

// Row i's terms of the kink slack: where 0 < band and |u| ≤ band = kink_band(DI, ‖q_I[g,h]‖, ‖k_I[t]‖),
// |dI·w| times max|k_I[t]| adds to (row, head), times max|q_I[g,h]| to key t (core/result.hpp).
template <class P>
void Rank<P>::kink_terms(int64_t i, const std::vector<int64_t>& keys, const Eigen::Ref<const Mat<R>>& u,
                         const Vec<R>& dI, const Eigen::Ref<const Mat<R>>& qI, const Eigen::Ref<const Mat<R>>& kI,
                         double& row_most, std::vector<double>& key_sums) const {
  std::vector<double> heads(d_.HI, 0.0), q_norm(d_.HI), q_most(d_.HI);
  for (int64_t h = 0; h < d_.HI; ++h) {
    q_norm[h] = static_cast<double>(qI.row(h).norm());
    q_most[h] = static_cast<double>(qI.row(h).cwiseAbs().maxCoeff());
  }
  for (int64_t t = 0; t < static_cast<int64_t>(keys.size()); ++t) {
    const double k_norm = static_cast<double>(kI.row(t).norm()), k_most = static_cast<double>(kI.row(t).cwiseAbs().maxCoeff());
    for (int64_t h = 0; h < d_.HI; ++h) {
      const double band = kink_band(d_.DI, q_norm[h], k_norm);
      if (!(band > 0) || std::fabs(static_cast<double>(u(t, h))) > band) continue;
      const double c = std::fabs(static_cast<double>(dI(t) * w_(i, h)));
      heads[h] += c * k_most;
      key_sums[keys[t]] += c * q_most[h];
    }
  }
  for (double x : heads) row_most = std::max(row_most, x);
}

}  // namespace dsa::detail
