// Sparse absorbed/explicit MLA attention of one rank: forward and backward (SPEC.md §5–§6).
// Members of detail::Rank (rank.hpp), included by core.cpp only.
#pragma once

#include "reference/rank.hpp"

namespace dsa::detail {

template <class P>
void Rank<P>::project_queries() {
  Qt_.resize(Tq_, d_.H * CR_);
  for (int64_t h = 0; h < d_.H; ++h) {
    Qt_.middleCols(h * CR_, d_.C) = q_nope_.middleCols(h * d_.Dn, d_.Dn) * W_UK_.middleRows(h * d_.Dn, d_.Dn);
    Qt_.middleCols(h * CR_ + d_.C, d_.R) = q_pe_.middleCols(h * d_.R, d_.R);
  }
  bf_inplace<P>(Qt_);
}

template <class P>
void Rank<P>::materialize_explicit_keys() {
  k_nope_.resize(Tp_, d_.H * d_.Dn);
  v_.resize(Tp_, d_.H * d_.Dv);
  for (int64_t h = 0; h < d_.H; ++h) {
    k_nope_.middleCols(h * d_.Dn, d_.Dn) = c_ * W_UK_.middleRows(h * d_.Dn, d_.Dn).transpose();
    v_.middleCols(h * d_.Dv, d_.Dv) = c_ * W_UV_.middleRows(h * d_.Dv, d_.Dv).transpose();
  }
  bf_inplace<P>(k_nope_);
  bf_inplace<P>(v_);
}

template <class P>
auto Rank<P>::gather_K(const std::vector<int64_t>& keys) const -> Mat<R> {
  Mat<R> K(static_cast<int64_t>(keys.size()), CR_);
  for (size_t j = 0; j < keys.size(); ++j) K.row(j) << c_.row(keys[j]), k_pe_.row(keys[j]);
  return K;
}

// logit[h, j] = s · Q~[g,h] · K~[keys[j]]  (explicit: s·(q_nope·k_nope + q_pe·k_pe)).
template <class P>
auto Rank<P>::logits(int64_t i, const std::vector<int64_t>& keys) const -> Mat<R> {
  const int64_t n = static_cast<int64_t>(keys.size());
  if (p_.path == Path::absorbed) {
    Eigen::Map<const Mat<R>> Q(Qt_.row(i).data(), d_.H, CR_);
    return s_ * (Q * gather_K(keys).transpose());
  }
  Mat<R> out(d_.H, n);
  for (int64_t h = 0; h < d_.H; ++h)
    for (int64_t j = 0; j < n; ++j)
      out(h, j) = s_ * (q_nope_.row(i).segment(h * d_.Dn, d_.Dn).dot(k_nope_.row(keys[j]).segment(h * d_.Dn, d_.Dn)) +
                        q_pe_.row(i).segment(h * d_.R, d_.R).dot(k_pe_.row(keys[j])));
  return out;
}

template <class P>
void Rank<P>::attention_forward(RankOutput& out) {
  O_lat_ = Mat<R>::Zero(Tq_, d_.H * d_.C);
  lse_ = Mat<R>::Constant(Tq_, d_.H, -std::numeric_limits<R>::infinity());
  O_ = Mat<R>::Zero(Tq_, d_.H * d_.Dv);
#pragma omp parallel for schedule(static, 1) if (parallel_)
  for (int64_t i = 0; i < Tq_; ++i) {
    if (S_[i].empty()) continue;  // O = 0, lse = −inf: never NaN
    const Mat<R> l = logits(i, S_[i]);
    Mat<R> Pb(l.rows(), l.cols());
    for (int64_t h = 0; h < d_.H; ++h) {
      lse_(i, h) = row_lse(l.row(h).transpose());
      Pb.row(h) = P::exp(l.row(h).array() - lse_(i, h)).unaryExpr([](R x) { return P::bf(x); });
    }
    Mat<R> V(Pb.cols(), d_.C);
    for (size_t j = 0; j < S_[i].size(); ++j) V.row(j) = c_.row(S_[i][j]);
    Eigen::Map<Mat<R>>(O_lat_.row(i).data(), d_.H, d_.C) = Pb * V;
    if (p_.path == Path::explicit_) {
      for (int64_t h = 0; h < d_.H; ++h)
        for (size_t j = 0; j < S_[i].size(); ++j)
          O_.row(i).segment(h * d_.Dv, d_.Dv) += Pb(h, j) * v_.row(S_[i][j]).segment(h * d_.Dv, d_.Dv);
    }
  }
  bf_inplace<P>(O_lat_);
  if (p_.path == Path::absorbed)
    for (int64_t h = 0; h < d_.H; ++h)
      O_.middleCols(h * d_.Dv, d_.Dv) =
          O_lat_.middleCols(h * d_.C, d_.C) * W_UV_.middleRows(h * d_.Dv, d_.Dv).transpose();
  bf_inplace<P>(O_);
  out.O = to_tensor<R>(O_, {Tq_, d_.H, d_.Dv});
  out.O_lat = to_tensor<R>(O_lat_, {Tq_, d_.H, d_.C});
  out.lse = to_tensor<R>(lse_, {Tq_, d_.H});
}

template <class P>
void Rank<P>::attention_backward(RankOutput& out) {
  const int64_t H = d_.H, C = d_.C;
  // dO_lat = W_UVᵀ·dO (absorbed) is a GEMM output: bf16 under the bf16 policy.
  Mat<R> dO_lat(Tq_, H * C);
  for (int64_t h = 0; h < H; ++h)
    dO_lat.middleCols(h * C, C) = dO_.middleCols(h * d_.Dv, d_.Dv) * W_UV_.middleRows(h * d_.Dv, d_.Dv);
  bf_inplace<P>(dO_lat);

  const bool absorbed = p_.path == Path::absorbed;
  // Key-side accumulators: absorbed dK~ [Tp, C+R] and dV~ [Tp, C]; explicit dk_nope, dk_pe, dv.
  const int64_t kcols = absorbed ? CR_ : H * d_.Dn + d_.R;
  const int64_t vcols = absorbed ? C : H * d_.Dv;
  const int nthreads = parallel_ ? omp_get_max_threads() : 1;
  std::vector<Mat<R>> dK(nthreads, Mat<R>::Zero(Tp_, kcols)), dV(nthreads, Mat<R>::Zero(Tp_, vcols));
  Mat<R> dQ = Mat<R>::Zero(Tq_, absorbed ? H * CR_ : H * (d_.Dn + d_.R));
  std::vector<char> used(Tp_, 0);
  for (auto& keys : S_)
    for (int64_t t : keys) used[t] = 1;
  const R s_dq = opt_.mutant == Mutant::dq_missing_scale ? R(1) : s_;

#pragma omp parallel for schedule(static, 1) if (parallel_)
  for (int64_t i = 0; i < Tq_; ++i) {
    const auto& keys = S_[i];
    if (keys.empty()) continue;
    const int tid = omp_get_thread_num();
    const int64_t n = static_cast<int64_t>(keys.size());
    const Mat<R> l = logits(i, keys);
    Mat<R> Pf(H, n);  // P in fp32, recomputed from the stored lse
    for (int64_t h = 0; h < H; ++h) {
      R lse = lse_(i, h);
      if (opt_.mutant == Mutant::base2_lse_backward) lse = static_cast<R>(lse / std::log(2.0));
      Pf.row(h) = P::exp(l.row(h).array() - lse);
    }
    const Mat<R> Pb = Pf.unaryExpr([](R x) { return P::bf(x); });
    Mat<R> dP(H, n);
    Vec<R> delta(H);
    if (absorbed) {
      Eigen::Map<const Mat<R>> dOl(dO_lat.row(i).data(), H, C), Ol(O_lat_.row(i).data(), H, C);
      Mat<R> V(n, C);
      for (int64_t j = 0; j < n; ++j) V.row(j) = c_.row(keys[j]);
      dP = dOl * V.transpose();
      delta = (dOl.array() * Ol.array()).rowwise().sum();
    } else {
      for (int64_t h = 0; h < H; ++h) {
        auto dOh = dO_.row(i).segment(h * d_.Dv, d_.Dv);
        for (int64_t j = 0; j < n; ++j) dP(h, j) = dOh.dot(v_.row(keys[j]).segment(h * d_.Dv, d_.Dv));
        delta(h) = dOh.dot(O_.row(i).segment(h * d_.Dv, d_.Dv));
      }
    }
    if (opt_.mutant == Mutant::dlogit_missing_delta) delta.setZero();
    const Mat<R> dl = (Pf.array() * (dP.colwise() - delta).array()).matrix().unaryExpr([](R x) { return P::bf(x); });

    if (absorbed) {
      Eigen::Map<const Mat<R>> Q(Qt_.row(i).data(), H, CR_);
      Eigen::Map<const Mat<R>> dOl(dO_lat.row(i).data(), H, C);
      const Mat<R> K = gather_K(keys);
      Eigen::Map<Mat<R>>(dQ.row(i).data(), H, CR_) = s_dq * (dl * K);
      const Mat<R> dKrows = s_ * (dl.transpose() * Q);
      const Mat<R> dVrows = Pb.transpose() * dOl;
      for (int64_t j = 0; j < n; ++j) {
        dK[tid].row(keys[j]) += dKrows.row(j);
        dV[tid].row(keys[j]) += dVrows.row(j);
      }
    } else {
      const int64_t Dn = d_.Dn, Rr = d_.R, Dv = d_.Dv;
      for (int64_t h = 0; h < H; ++h) {
        auto dqn = dQ.row(i).segment(h * (Dn + Rr), Dn);
        auto dqp = dQ.row(i).segment(h * (Dn + Rr) + Dn, Rr);
        for (int64_t j = 0; j < n; ++j) {
          const int64_t t = keys[j];
          dqn += s_dq * dl(h, j) * k_nope_.row(t).segment(h * Dn, Dn);
          dqp += s_dq * dl(h, j) * k_pe_.row(t);
          dK[tid].row(t).segment(h * Dn, Dn) += s_ * dl(h, j) * q_nope_.row(i).segment(h * Dn, Dn);
          dK[tid].row(t).segment(H * Dn, Rr) += s_ * dl(h, j) * q_pe_.row(i).segment(h * Rr, Rr);
          dV[tid].row(t).segment(h * Dv, Dv) += Pb(h, j) * dO_.row(i).segment(h * Dv, Dv);
        }
      }
    }
  }
  for (int t = 1; t < nthreads; ++t) {
    dK[0] += dK[t];
    dV[0] += dV[t];
  }
  bf_inplace<P>(dQ);

  // Query-side and weight gradients.
  Mat<R> dq_nope(Tq_, H * d_.Dn), dq_pe(Tq_, H * d_.R);
  Mat<R> dW_UK(H * d_.Dn, C), dW_UV(H * d_.Dv, C);
  Mat<R> dc_partial(Tp_, C), dk_pe_partial(Tp_, d_.R);
  if (absorbed) {
    for (int64_t h = 0; h < H; ++h) {
      const auto dQn = dQ.middleCols(h * CR_, C);
      dq_nope.middleCols(h * d_.Dn, d_.Dn) = dQn * W_UK_.middleRows(h * d_.Dn, d_.Dn).transpose();
      dq_pe.middleCols(h * d_.R, d_.R) = dQ.middleCols(h * CR_ + C, d_.R);
      dW_UK.middleRows(h * d_.Dn, d_.Dn) = q_nope_.middleCols(h * d_.Dn, d_.Dn).transpose() * dQn;
      dW_UV.middleRows(h * d_.Dv, d_.Dv) = dO_.middleCols(h * d_.Dv, d_.Dv).transpose() * O_lat_.middleCols(h * C, C);
    }
    dc_partial = dK[0].leftCols(C) + dV[0];
    dk_pe_partial = dK[0].rightCols(d_.R);
  } else {
    for (int64_t h = 0; h < H; ++h) {
      dq_nope.middleCols(h * d_.Dn, d_.Dn) = dQ.middleCols(h * (d_.Dn + d_.R), d_.Dn);
      dq_pe.middleCols(h * d_.R, d_.R) = dQ.middleCols(h * (d_.Dn + d_.R) + d_.Dn, d_.R);
    }
    dc_partial.setZero();
    dW_UK.setZero();
    dW_UV.setZero();
    // Only keys some query used: unused key rows may hold poison (NaN), and 0·NaN = NaN.
    for (int64_t t = 0; t < Tp_; ++t) {
      if (!used[t]) continue;
      for (int64_t h = 0; h < H; ++h) {
        const auto dkn = dK[0].row(t).segment(h * d_.Dn, d_.Dn);
        const auto dv = dV[0].row(t).segment(h * d_.Dv, d_.Dv);
        dc_partial.row(t) += dkn * W_UK_.middleRows(h * d_.Dn, d_.Dn) + dv * W_UV_.middleRows(h * d_.Dv, d_.Dv);
        dW_UK.middleRows(h * d_.Dn, d_.Dn) += dkn.transpose() * c_.row(t);
        dW_UV.middleRows(h * d_.Dv, d_.Dv) += dv.transpose() * c_.row(t);
      }
    }
    dk_pe_partial = dK[0].rightCols(d_.R);
  }
  bf_inplace<P>(dq_nope);
  bf_inplace<P>(dq_pe);
  out.dq_nope = to_tensor<R>(dq_nope, {Tq_, H, d_.Dn});
  out.dq_pe = to_tensor<R>(dq_pe, {Tq_, H, d_.R});
  out.dc = round_out(reduce_scatter_keys(dc_partial));
  out.dk_pe = round_out(reduce_scatter_keys(dk_pe_partial));
  out.dW_UK = to_tensor<R>(dW_UK, {H, d_.Dn, C});
  out.dW_UV = to_tensor<R>(dW_UV, {H, d_.Dv, C});
  all_reduce(out.dW_UK.data.data(), out.dW_UK.size());
  all_reduce(out.dW_UV.data.data(), out.dW_UV.size());
  out.dW_UK = round_out(std::move(out.dW_UK));
  out.dW_UV = round_out(std::move(out.dW_UV));
}

}  // namespace dsa::detail
