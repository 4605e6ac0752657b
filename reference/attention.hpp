// Sparse absorbed/explicit MLA attention of one rank: forward and backward (SPEC.md §5–§6).
// Members of detail::Rank (rank.hpp), included by core.cpp only.
#pragma once

#include <optional>

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
  lse_.resize(Tq_, H);
  lse_.setConstant(-std::numeric_limits<R>::infinity());
  O_.resize(Tq_, H * d_.Dv);
  std::optional<TraceSpan> span(std::in_place, "reference: forward rows");
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
      const auto K = key_rows(Kt_, keys, K_buf);  // V~ = K.leftCols(C)
      auto Pb = l_buf.as(H, n);                    // the logits, then P rounded in place
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
  span.emplace("reference: O projection");
  bf_inplace<P>(O_lat_);
  if (p_.path == Path::absorbed) {
#pragma omp parallel for schedule(static) if (parallel_)
    for (int64_t h = 0; h < H; ++h)
      O_.middleCols(h * d_.Dv, d_.Dv).noalias() =
          O_lat_.middleCols(h * C, C) * W_UV_.middleRows(h * d_.Dv, d_.Dv).transpose();
  }
  bf_inplace<P>(O_);
  span.emplace("reference: forward outputs");
  out.O = to_tensor<R>(O_, {Tq_, d_.H, d_.Dv});
  out.O_lat = to_tensor<R>(O_lat_, {Tq_, d_.H, d_.C});
  out.lse = to_tensor<R>(lse_, {Tq_, d_.H});
}

// One query row of the backward (SPEC.md §6): dQ~[g] into dQ_row, and the row's dK~, dV~ terms
// added to this thread's key-side partials dK, dV. dO_lat_row is W_UVᵀ·dO of the row, [H, C]
// (absorbed only). The products are GEMMs over the row's gathered K~ rows.
template <class P>
void Rank<P>::backward_row(int64_t i, const R* dO_lat_row, R* dQ_row, Held<R>& dK, Held<R>& dV,
                           BackwardScratch& w) const {
  const int64_t H = d_.H, C = d_.C;
  const auto& keys = S_[i];
  const bool absorbed = p_.path == Path::absorbed;
  const int64_t n = static_cast<int64_t>(keys.size());
  const int64_t qcols = absorbed ? CR_ : d_.Dn + d_.R;
  Eigen::Map<Mat<R>> dQ(dQ_row, H, qcols);
  if (keys.empty()) {
    dQ.setZero();
    return;
  }
  const R s_dq = opt_.mutant == Mutant::dq_missing_scale ? R(1) : s_;
  const auto K = key_rows(Kt_, keys, w.K);  // V~ = K.leftCols(C)
  auto Pf = w.Pf.as(H, n);  // the logits, then P in fp32, recomputed from the stored lse
  auto Pb = w.Pb.as(H, n);  // P rounded: the operand of dV~
  auto dl = w.dl.as(H, n);  // dP, then dlogit in place
  logits(i, keys, K, Pf);
  for (int64_t h = 0; h < H; ++h) {
    R lse = lse_(i, h);
    if (opt_.mutant == Mutant::base2_lse_backward) lse = static_cast<R>(lse / std::log(2.0));
    Pf.row(h) = P::exp(Pf.row(h).array() - lse);
  }
  Pb = Pf.unaryExpr([](R x) { return P::bf(x); });
  Vec<R> delta(H);
  if (absorbed) {
    Eigen::Map<const Mat<R>> dOl(dO_lat_row, H, C), Ol(O_lat_.row(i).data(), H, C);
    dl.noalias() = dOl * K.leftCols(C).transpose();  // dP = dO_lat·V~ᵀ
    delta = (dOl.array() * Ol.array()).rowwise().sum();
  } else {
    for (int64_t h = 0; h < H; ++h) {
      auto dOh = dO_.row(i).segment(h * d_.Dv, d_.Dv);
      for (int64_t j = 0; j < n; ++j) dl(h, j) = dOh.dot(v_.row(keys[j]).segment(h * d_.Dv, d_.Dv));
      delta(h) = dOh.dot(O_.row(i).segment(h * d_.Dv, d_.Dv));
    }
  }
  if constexpr (!P::rounds) delta_terms(i, keys, K, Pf, dl, absorbed ? dO_lat_row : nullptr, w);
  if (opt_.mutant == Mutant::dlogit_missing_delta) delta.setZero();
  dl = (Pf.array() * (dl.colwise() - delta).array()).matrix().unaryExpr([](R x) { return P::bf(x); });

  if (absorbed) {
    // dQ~ = s·dlogit·K~ [H, n]·[n, C+R]; the key rows' dK~ = s·dlogitᵀ·Q~ and dV~ = Pᵀ·dO_lat.
    Eigen::Map<const Mat<R>> Q(Qt_.row(i).data(), H, CR_), dOl(dO_lat_row, H, C);
    dQ.noalias() = s_dq * (dl * K);
    if (consecutive(keys)) {  // the key rows' partials are one block: the GEMMs add into it
      dK.middleRows(keys.front(), n).noalias() += s_ * (dl.transpose() * Q);
      dV.middleRows(keys.front(), n).noalias() += Pb.transpose() * dOl;
      return;
    }
    auto dKrows = w.dKrows.as(n, CR_);
    auto dVrows = w.dVrows.as(n, C);
    dKrows.noalias() = s_ * (dl.transpose() * Q);
    dVrows.noalias() = Pb.transpose() * dOl;
    for (int64_t j = 0; j < n; ++j) {
      dK.row(keys[j]) += dKrows.row(j);
      dV.row(keys[j]) += dVrows.row(j);
    }
    return;
  }
  const int64_t Dn = d_.Dn, Rr = d_.R, Dv = d_.Dv;
  dQ.setZero();
  for (int64_t h = 0; h < H; ++h) {
    auto dqn = dQ.row(h).head(Dn);
    auto dqp = dQ.row(h).tail(Rr);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t t = keys[j];
      dqn += s_dq * dl(h, j) * k_nope_.row(t).segment(h * Dn, Dn);
      dqp += s_dq * dl(h, j) * k_pe_.row(t);
      dK.row(t).segment(h * Dn, Dn) += s_ * dl(h, j) * q_nope_.row(i).segment(h * Dn, Dn);
      dK.row(t).segment(H * Dn, Rr) += s_ * dl(h, j) * q_pe_.row(i).segment(h * Rr, Rr);
      dV.row(t).segment(h * Dv, Dv) += Pb(h, j) * dO_.row(i).segment(h * Dv, Dv);
    }
  }
}

// Row i's terms of the Δ slack (core/result.hpp DeltaSlack): per head, the band of Δ from O_lat's
// (explicit: O's) output rounding and P's rounding before P·V, times the row's shift vector
// Σ_j P_j·K~_j, whose first C columns are O_lat itself (through W_UK by Cauchy–Schwarz); and, for
// each of the row's keys, P_j times the fp32 noise band of dP − Δ times the largest |Q~| of the key
// gradient's part.
template <class P>
void Rank<P>::delta_terms(int64_t i, const std::vector<int64_t>& keys, const Eigen::Ref<const Mat<R>>& K,
                          const Eigen::Ref<const Mat<R>>& Pf, const Eigen::Ref<const Mat<R>>& dP,
                          const R* dO_lat_row, BackwardScratch& w) const {
  DeltaSlack& slack = w.delta;
  const int64_t H = d_.H, C = d_.C, Dn = d_.Dn, Rr = d_.R, Dv = d_.Dv;
  const Mat<R> pe = Pf * K.rightCols(Rr);  // [H, R]: Σ_j P_j·k_pe_j
  for (int64_t h = 0; h < H; ++h) {
    const double abs_P_dP = static_cast<double>((Pf.row(h).array() * dP.row(h).array().abs()).sum());
    double abs_dO_O = 0, nope = 0;
    if (dO_lat_row) {
      Eigen::Map<const Vec<R>> dOl(dO_lat_row + h * C, C), Ol(O_lat_.row(i).data() + h * C, C);
      abs_dO_O = static_cast<double>((dOl.array() * Ol.array()).abs().sum());
      nope = static_cast<double>(Ol.norm()) * W_UK_row_norm_[h];
    } else {
      auto dOh = dO_.row(i).segment(h * Dv, Dv);
      abs_dO_O = static_cast<double>((dOh.array() * O_.row(i).segment(h * Dv, Dv).array()).abs().sum());
      for (int64_t e = 0; e < Dn; ++e) {
        R acc = 0;
        for (size_t j = 0; j < keys.size(); ++j) acc += Pf(h, j) * k_nope_(keys[j], h * Dn + e);
        nope = std::max(nope, std::abs(static_cast<double>(acc)));
      }
    }
    const double shift = std::abs(static_cast<double>(s_)) * delta_band(abs_dO_O, abs_P_dP);
    slack.dq_nope = std::max(slack.dq_nope, shift * nope);
    slack.dq_pe = std::max(slack.dq_pe, shift * static_cast<double>(pe.row(h).cwiseAbs().maxCoeff()));
    // Key side: dK~[t] += s·dS·Q~[g, h] with dS off by the fp32 noise of dP − Δ; |Q~[:C]| explicit
    // through W_UK (q_nope·W_UK[h]).
    const double noise = std::abs(static_cast<double>(s_)) *
                         delta_noise_band(dO_lat_row ? C : Dv, abs_dO_O, abs_P_dP);
    double q_nope_max = 0, q_pe_max = 0;
    if (dO_lat_row) {
      Eigen::Map<const Vec<R>> Qh(Qt_.row(i).data() + h * CR_, CR_);
      q_nope_max = static_cast<double>(Qh.head(C).cwiseAbs().maxCoeff());
      q_pe_max = static_cast<double>(Qh.tail(Rr).cwiseAbs().maxCoeff());
    } else {
      q_nope_max = static_cast<double>(q_nope_.row(i).segment(h * Dn, Dn).norm()) * W_UK_col_norm_[h];
      q_pe_max = static_cast<double>(q_pe_.row(i).segment(h * Rr, Rr).cwiseAbs().maxCoeff());
    }
    for (size_t j = 0; j < keys.size(); ++j) {
      const double pj = static_cast<double>(Pf(h, static_cast<int64_t>(j))) * noise;
      w.key_nope[keys[j]] += pj * q_nope_max;
      w.key_pe[keys[j]] += pj * q_pe_max;
    }
  }
}

// The backward walks the query rows in blocks of kBackwardRows: dO_lat and dQ~ live one block at
// a time (whole, they were [Tq, H·C] and [Tq, H·(C+R)]: 1.1 GiB of fresh pages per run at S = 1024,
// which a VM hands out slowly), and each block's dq_nope, dq_pe go straight to the output. The
// block size is a constant, so dW_UK's sum over blocks has the same grouping on every thread count.
template <class P>
void Rank<P>::attention_backward(RankOutput& out) {
  const int64_t H = d_.H, C = d_.C, Dn = d_.Dn, Rr = d_.R, Dv = d_.Dv;
  const bool absorbed = p_.path == Path::absorbed;
  const int64_t qcols = absorbed ? CR_ : Dn + Rr;  // dQ columns per head
  const int64_t block = std::min<int64_t>(kBackwardRows, std::max<int64_t>(Tq_, 1));
  Held<R> dO_lat(absorbed ? block : 0, H * C), dQ(block, H * qcols);
  out.dq_nope = TensorD({Tq_, H, Dn}, Uninitialized{});  // every block's rows written below
  out.dq_pe = TensorD({Tq_, H, Rr}, Uninitialized{});
  Held<R> dW_UK = Held<R>::zero(H * Dn, C), dW_UV(H * Dv, C);

  // Key-side accumulators: absorbed dK~ [Tp, C+R] and dV~ [Tp, C]; explicit dk_nope, dk_pe, dv.
  // One pair per thread, each summed over its rows in row order, then summed in thread order: the
  // same result run to run for a given thread count.
  const int64_t kcols = absorbed ? CR_ : H * Dn + Rr;
  const int64_t vcols = absorbed ? C : H * Dv;
  const int nthreads = parallel_ ? omp_get_max_threads() : 1;
  std::vector<Held<R>> dK(nthreads), dV(nthreads);
  std::vector<DeltaSlack> delta(nthreads);
  std::vector<std::vector<double>> key_nope(nthreads), key_pe(nthreads);  // summed in thread order
  if (!P::rounds && absorbed) {
    W_UK_row_norm_.assign(H, 0.0);
    for (int64_t r = 0; r < H * Dn; ++r)
      W_UK_row_norm_[r / Dn] = std::max(W_UK_row_norm_[r / Dn], static_cast<double>(W_UK_.row(r).norm()));
  }
  if (!P::rounds && !absorbed) {
    W_UK_col_norm_.assign(H, 0.0);
    for (int64_t h = 0; h < H; ++h)
      W_UK_col_norm_[h] = static_cast<double>(W_UK_.middleRows(h * Dn, Dn).colwise().norm().maxCoeff());
  }

  std::optional<TraceSpan> span(std::in_place, "reference: backward rows");
#pragma omp parallel if (parallel_)
  {
    const int tid = omp_get_thread_num();
    dK[tid].resize(Tp_, kcols);
    dV[tid].resize(Tp_, vcols);
    dK[tid].setZero();
    dV[tid].setZero();
    BackwardScratch w(max_keys_, H, CR_, C, absorbed, P::rounds ? 0 : Tp_);
    Mat<R> dq_nope_h(block, Dn);
    for (int64_t b0 = 0; b0 < Tq_; b0 += block) {
      const int64_t nb = std::min(block, Tq_ - b0);
      if (absorbed) {
        // dO_lat = W_UVᵀ·dO is a GEMM output: bf16 under the bf16 policy.
#pragma omp for schedule(static)
        for (int64_t h = 0; h < H; ++h) {
          auto dOl = dO_lat.block(0, h * C, nb, C);
          dOl.noalias() = dO_.block(b0, h * Dv, nb, Dv) * W_UV_.middleRows(h * Dv, Dv);
          bf_inplace<P>(dOl);
        }
      }
#pragma omp for schedule(static, 1)
      for (int64_t i = b0; i < b0 + nb; ++i)
        backward_row(i, absorbed ? dO_lat.row(i - b0).data() : nullptr, dQ.row(i - b0).data(), dK[tid], dV[tid], w);
      // The block's query-side gradients, head by head: dQ~ rounded (it is an output of the
      // attention kernel), dq_nope = dQ~[:, :C]·W_UK, dq_pe = dQ~[:, C:], dW_UK += q_nopeᵀ·dQ~[:, :C].
#pragma omp for schedule(static)
      for (int64_t h = 0; h < H; ++h) {
        auto dQh = dQ.block(0, h * qcols, nb, qcols);
        bf_inplace<P>(dQh);
        auto dqn = dq_nope_h.topRows(nb);
        if (absorbed) {
          dqn.noalias() = dQh.leftCols(C) * W_UK_.middleRows(h * Dn, Dn).transpose();
          dW_UK.middleRows(h * Dn, Dn).noalias() += q_nope_.block(b0, h * Dn, nb, Dn).transpose() * dQh.leftCols(C);
        } else {
          dqn = dQh.leftCols(Dn);
        }
        bf_inplace<P>(dqn);
        write_block(out.dq_nope, b0, h * Dn, dqn);
        write_block(out.dq_pe, b0, h * Rr, dQh.rightCols(Rr).unaryExpr([](R x) { return P::bf(x); }));
      }
    }
    delta[tid] = w.delta;
    key_nope[tid] = std::move(w.key_nope);
    key_pe[tid] = std::move(w.key_pe);
  }
  if (!P::rounds) {
    // The Δ slack: the largest over threads, then over ranks; the key side's sums over threads and
    // ranks (every rank's rows may select a key), then the largest over keys.
    std::vector<double> mine(2, 0.0);
    for (const DeltaSlack& d : delta) mine = {std::max(mine[0], d.dq_nope), std::max(mine[1], d.dq_pe)};
    const std::vector<double> all = all_max(mine);
    std::vector<double> keys(2 * Tp_, 0.0);
    for (int t = 0; t < nthreads; ++t)
      for (int64_t k = 0; k < static_cast<int64_t>(key_nope[t].size()); ++k)
        keys[k] += key_nope[t][k], keys[Tp_ + k] += key_pe[t][k];
    all_reduce(keys.data(), 2 * Tp_);
    double dc = 0, dk_pe = 0;
    for (int64_t k = 0; k < Tp_; ++k) dc = std::max(dc, keys[k]), dk_pe = std::max(dk_pe, keys[Tp_ + k]);
    out.delta = DeltaSlack{all[0], all[1], dc, dk_pe};
  }
  span.emplace("reference: backward key-side sums");
  for (int t = 1; t < nthreads; ++t) {
    if (dK[t].size() == 0) continue;  // a team smaller than asked for
    dK[0] += dK[t];
    dV[0] += dV[t];
  }

  // Key-side and weight gradients.
  span.emplace("reference: dW_UV, dc, outputs");
  Held<R> dc_partial(Tp_, C), dk_pe_partial(Tp_, Rr);
  if (absorbed) {
#pragma omp parallel for schedule(static) if (parallel_)
    for (int64_t h = 0; h < H; ++h)
      dW_UV.middleRows(h * Dv, Dv).noalias() = dO_.middleCols(h * Dv, Dv).transpose() * O_lat_.middleCols(h * C, C);
    dc_partial = dK[0].leftCols(C) + dV[0];
    dk_pe_partial = dK[0].rightCols(Rr);
  } else {
    std::vector<char> used(Tp_, 0);
    for (auto& keys : S_)
      for (int64_t t : keys) used[t] = 1;
    dc_partial.setZero();
    dW_UV.setZero();
    // Only keys some query used: unused key rows may hold poison (NaN), and 0·NaN = NaN.
    for (int64_t t = 0; t < Tp_; ++t) {
      if (!used[t]) continue;
      for (int64_t h = 0; h < H; ++h) {
        const auto dkn = dK[0].row(t).segment(h * Dn, Dn);
        const auto dv = dV[0].row(t).segment(h * Dv, Dv);
        dc_partial.row(t) += dkn * W_UK_.middleRows(h * Dn, Dn) + dv * W_UV_.middleRows(h * Dv, Dv);
        dW_UK.middleRows(h * Dn, Dn) += dkn.transpose() * c_.row(t);
        dW_UV.middleRows(h * Dv, Dv) += dv.transpose() * c_.row(t);
      }
    }
    dk_pe_partial = dK[0].rightCols(Rr);
  }
  out.dc = round_out(reduce_scatter_keys(dc_partial));
  out.dk_pe = round_out(reduce_scatter_keys(dk_pe_partial));
  out.dW_UK = to_tensor<R>(dW_UK, {H, Dn, C});
  out.dW_UV = to_tensor<R>(dW_UV, {H, Dv, C});
  all_reduce(out.dW_UK.data.data(), out.dW_UK.size());
  all_reduce(out.dW_UV.data.data(), out.dW_UV.size());
  out.dW_UK = round_out(std::move(out.dW_UK));
  out.dW_UV = round_out(std::move(out.dW_UV));
}

}  // namespace dsa::detail
