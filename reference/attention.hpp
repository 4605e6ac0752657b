// Sparse absorbed/explicit MLA attention of one rank: forward and backward (SPEC.md §5–§6).
// Members of detail::Rank (rank.hpp), included by core.cpp only.
#pragma once

#include "reference/rank.hpp"

namespace dsa::detail {

// The per-head projections below are independent GEMMs: OpenMP runs them over heads, each on one
// thread. (Left to Eigen, one [Tq, Dn]·[Dn, C] product at a time is split over the threads, whose
// busy-wait hand-offs stall whenever the machine is shared: 5x slower on 2 loaded cores.)
template <class P>
void Rank<P>::project_queries() {
  Qt_.resize(Tq_, d_.H * CR_);
#pragma omp parallel for schedule(static) if (parallel_)
  for (int64_t h = 0; h < d_.H; ++h) {
    Qt_.middleCols(h * CR_, d_.C).noalias() = q_nope_.middleCols(h * d_.Dn, d_.Dn) * W_UK_.middleRows(h * d_.Dn, d_.Dn);
    Qt_.middleCols(h * CR_ + d_.C, d_.R) = q_pe_.middleCols(h * d_.R, d_.R);
  }
  bf_inplace<P>(Qt_);
}

template <class P>
void Rank<P>::materialize_explicit_keys() {
  k_nope_.resize(Tp_, d_.H * d_.Dn);
  v_.resize(Tp_, d_.H * d_.Dv);
#pragma omp parallel for schedule(static) if (parallel_)
  for (int64_t h = 0; h < d_.H; ++h) {
    k_nope_.middleCols(h * d_.Dn, d_.Dn).noalias() = c_ * W_UK_.middleRows(h * d_.Dn, d_.Dn).transpose();
    v_.middleCols(h * d_.Dv, d_.Dv).noalias() = c_ * W_UV_.middleRows(h * d_.Dv, d_.Dv).transpose();
  }
  bf_inplace<P>(k_nope_);
  bf_inplace<P>(v_);
}

// logit[h, j] = s · Q~[g,h] · K~[keys[j]]: one GEMM [H, C+R]·[C+R, n] over the gathered K~ rows
// (explicit: s·(q_nope·k_nope + q_pe·k_pe), head by head).
template <class P>
void Rank<P>::logits(int64_t i, const std::vector<int64_t>& keys, const Eigen::Ref<const Mat<R>>& K,
                     Eigen::Ref<Mat<R>> out) const {
  const int64_t n = static_cast<int64_t>(keys.size());
  if (p_.path == Path::absorbed) {
    Eigen::Map<const Mat<R>> Q(Qt_.row(i).data(), d_.H, CR_);
    out.noalias() = s_ * (Q * K.transpose());
    return;
  }
  for (int64_t h = 0; h < d_.H; ++h)
    for (int64_t j = 0; j < n; ++j)
      out(h, j) = s_ * (q_nope_.row(i).segment(h * d_.Dn, d_.Dn).dot(k_nope_.row(keys[j]).segment(h * d_.Dn, d_.Dn)) +
                        q_pe_.row(i).segment(h * d_.R, d_.R).dot(k_pe_.row(keys[j])));
}

template <class P>
void Rank<P>::attention_forward(RankOutput& out) {
  const int64_t H = d_.H, C = d_.C;
  O_lat_.resize(Tq_, H * C);  // every row written below: a non-empty one by its GEMM
  lse_ = Mat<R>::Constant(Tq_, H, -std::numeric_limits<R>::infinity());
  O_.resize(Tq_, H * d_.Dv);
#pragma omp parallel if (parallel_)
  {
    Buffer<R> K_buf(max_keys_ * CR_), l_buf(H * max_keys_);
#pragma omp for schedule(static, 1)
    for (int64_t i = 0; i < Tq_; ++i) {
      const auto& keys = S_[i];
      Eigen::Map<Mat<R>> O_lat(O_lat_.row(i).data(), H, C);
      if (p_.path == Path::explicit_) O_.row(i).setZero();
      if (keys.empty()) {  // O = 0, lse = −inf: never NaN
        O_lat.setZero();
        continue;
      }
      const int64_t n = static_cast<int64_t>(keys.size());
      auto K = K_buf.as(n, CR_);  // V~ = K.leftCols(C)
      auto Pb = l_buf.as(H, n);   // the logits, then P rounded in place
      gather_rows_into(Kt_, keys, K);
      logits(i, keys, K, Pb);
      for (int64_t h = 0; h < H; ++h) {
        lse_(i, h) = row_lse(Pb.row(h).transpose());
        Pb.row(h) = P::exp(Pb.row(h).array() - lse_(i, h)).unaryExpr([](R x) { return P::bf(x); });
      }
      O_lat.noalias() = Pb * K.leftCols(C);
      if (p_.path == Path::explicit_) {
        for (int64_t h = 0; h < H; ++h)
          for (int64_t j = 0; j < n; ++j)
            O_.row(i).segment(h * d_.Dv, d_.Dv) += Pb(h, j) * v_.row(keys[j]).segment(h * d_.Dv, d_.Dv);
      }
    }
  }
  bf_inplace<P>(O_lat_);
  if (p_.path == Path::absorbed) {
#pragma omp parallel for schedule(static) if (parallel_)
    for (int64_t h = 0; h < H; ++h)
      O_.middleCols(h * d_.Dv, d_.Dv).noalias() =
          O_lat_.middleCols(h * C, C) * W_UV_.middleRows(h * d_.Dv, d_.Dv).transpose();
  }
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
#pragma omp parallel for schedule(static) if (parallel_)
  for (int64_t h = 0; h < H; ++h)
    dO_lat.middleCols(h * C, C).noalias() = dO_.middleCols(h * d_.Dv, d_.Dv) * W_UV_.middleRows(h * d_.Dv, d_.Dv);
  bf_inplace<P>(dO_lat);

  const bool absorbed = p_.path == Path::absorbed;
  // Key-side accumulators: absorbed dK~ [Tp, C+R] and dV~ [Tp, C]; explicit dk_nope, dk_pe, dv.
  // One pair per thread, each summed over its rows in row order, then summed in thread order: the
  // same result run to run for a given thread count.
  const int64_t kcols = absorbed ? CR_ : H * d_.Dn + d_.R;
  const int64_t vcols = absorbed ? C : H * d_.Dv;
  const int nthreads = parallel_ ? omp_get_max_threads() : 1;
  std::vector<Mat<R>> dK(nthreads), dV(nthreads);
  Mat<R> dQ(Tq_, absorbed ? H * CR_ : H * (d_.Dn + d_.R));  // every row written below
  std::vector<char> used(Tp_, 0);
  for (auto& keys : S_)
    for (int64_t t : keys) used[t] = 1;
  const R s_dq = opt_.mutant == Mutant::dq_missing_scale ? R(1) : s_;

#pragma omp parallel if (parallel_)
  {
    const int tid = omp_get_thread_num();
    dK[tid] = Mat<R>::Zero(Tp_, kcols);
    dV[tid] = Mat<R>::Zero(Tp_, vcols);
    Buffer<R> K_buf(max_keys_ * CR_), Pf_buf(H * max_keys_), Pb_buf(H * max_keys_), dl_buf(H * max_keys_);
    Buffer<R> dKrows_buf(absorbed ? max_keys_ * CR_ : 0), dVrows_buf(absorbed ? max_keys_ * C : 0);
#pragma omp for schedule(static, 1)
    for (int64_t i = 0; i < Tq_; ++i) {
      const auto& keys = S_[i];
      if (keys.empty()) {
        dQ.row(i).setZero();
        continue;
      }
      const int64_t n = static_cast<int64_t>(keys.size());
      auto K = K_buf.as(n, CR_);  // V~ = K.leftCols(C)
      auto Pf = Pf_buf.as(H, n);  // the logits, then P in fp32, recomputed from the stored lse
      auto Pb = Pb_buf.as(H, n);  // P rounded: the operand of dV~
      auto dl = dl_buf.as(H, n);  // dP, then dlogit in place
      gather_rows_into(Kt_, keys, K);
      logits(i, keys, K, Pf);
      for (int64_t h = 0; h < H; ++h) {
        R lse = lse_(i, h);
        if (opt_.mutant == Mutant::base2_lse_backward) lse = static_cast<R>(lse / std::log(2.0));
        Pf.row(h) = P::exp(Pf.row(h).array() - lse);
      }
      Pb = Pf.unaryExpr([](R x) { return P::bf(x); });
      Vec<R> delta(H);
      if (absorbed) {
        Eigen::Map<const Mat<R>> dOl(dO_lat.row(i).data(), H, C), Ol(O_lat_.row(i).data(), H, C);
        dl.noalias() = dOl * K.leftCols(C).transpose();  // dP = dO_lat·V~ᵀ
        delta = (dOl.array() * Ol.array()).rowwise().sum();
      } else {
        for (int64_t h = 0; h < H; ++h) {
          auto dOh = dO_.row(i).segment(h * d_.Dv, d_.Dv);
          for (int64_t j = 0; j < n; ++j) dl(h, j) = dOh.dot(v_.row(keys[j]).segment(h * d_.Dv, d_.Dv));
          delta(h) = dOh.dot(O_.row(i).segment(h * d_.Dv, d_.Dv));
        }
      }
      if (opt_.mutant == Mutant::dlogit_missing_delta) delta.setZero();
      dl = (Pf.array() * (dl.colwise() - delta).array()).matrix().unaryExpr([](R x) { return P::bf(x); });

      if (absorbed) {
        // dQ~ = s·dlogit·K~ [H, n]·[n, C+R]; the key rows' dK~ = s·dlogitᵀ·Q~ and dV~ = Pᵀ·dO_lat.
        Eigen::Map<const Mat<R>> Q(Qt_.row(i).data(), H, CR_);
        Eigen::Map<const Mat<R>> dOl(dO_lat.row(i).data(), H, C);
        Eigen::Map<Mat<R>>(dQ.row(i).data(), H, CR_).noalias() = s_dq * (dl * K);
        auto dKrows = dKrows_buf.as(n, CR_);
        auto dVrows = dVrows_buf.as(n, C);
        dKrows.noalias() = s_ * (dl.transpose() * Q);
        dVrows.noalias() = Pb.transpose() * dOl;
        for (int64_t j = 0; j < n; ++j) {
          dK[tid].row(keys[j]) += dKrows.row(j);
          dV[tid].row(keys[j]) += dVrows.row(j);
        }
      } else {
        const int64_t Dn = d_.Dn, Rr = d_.R, Dv = d_.Dv;
        dQ.row(i).setZero();
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
  }
  for (int t = 1; t < nthreads; ++t) {
    if (dK[t].size() == 0) continue;  // a team smaller than asked for
    dK[0] += dK[t];
    dV[0] += dV[t];
  }
  bf_inplace<P>(dQ);

  // Query-side and weight gradients.
  Mat<R> dq_nope(Tq_, H * d_.Dn), dq_pe(Tq_, H * d_.R);
  Mat<R> dW_UK(H * d_.Dn, C), dW_UV(H * d_.Dv, C);
  Mat<R> dc_partial(Tp_, C), dk_pe_partial(Tp_, d_.R);
  if (absorbed) {
#pragma omp parallel for schedule(static) if (parallel_)
    for (int64_t h = 0; h < H; ++h) {
      const auto dQn = dQ.middleCols(h * CR_, C);
      dq_nope.middleCols(h * d_.Dn, d_.Dn).noalias() = dQn * W_UK_.middleRows(h * d_.Dn, d_.Dn).transpose();
      dq_pe.middleCols(h * d_.R, d_.R) = dQ.middleCols(h * CR_ + C, d_.R);
      dW_UK.middleRows(h * d_.Dn, d_.Dn).noalias() = q_nope_.middleCols(h * d_.Dn, d_.Dn).transpose() * dQn;
      dW_UV.middleRows(h * d_.Dv, d_.Dv).noalias() =
          dO_.middleCols(h * d_.Dv, d_.Dv).transpose() * O_lat_.middleCols(h * C, C);
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
