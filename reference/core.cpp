// The DSA core, one rank at a time (SPEC.md §3–§7). A rank holds some query rows and all keys in
// global order; run_core is the one-rank case, run_core_sharded runs cp ranks on threads and joins
// them with the same collectives a fused backend uses. Written once over a precision policy.
#include "reference/core.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <thread>

#include "reference/comm.hpp"
#include "reference/errors.hpp"
#include "reference/precision.hpp"
#include "reference/topk.hpp"
#include "reference/visibility.hpp"

namespace dsa {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

template <class R>
using Mat = RowMat<R>;
template <class R>
using Vec = Eigen::Matrix<R, Eigen::Dynamic, 1>;

// Rows `rows` of a [T, ...] tensor as a [rows.size(), row_size] matrix of R.
template <class R>
Mat<R> gather_rows(const TensorD& t, const std::vector<int64_t>& rows) {
  Mat<R> m(static_cast<int64_t>(rows.size()), t.row_size());
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t j = 0; j < t.row_size(); ++j) m(i, j) = static_cast<R>(t.row(rows[i])[j]);
  return m;
}

template <class R>
Mat<R> as_matrix(const TensorD& t, int64_t rows, int64_t cols) {
  return ConstMatMap<double>(t.data.data(), rows, cols).cast<R>();
}

template <class R, class M>
TensorD to_tensor(const M& m, Shape shape) {
  TensorD t(std::move(shape));
  MatMap<double>(t.data.data(), m.rows(), m.cols()) = m.template cast<double>();
  return t;
}

// Where the rank's view of the stream comes from: the rows it believes it owns (in local order),
// the permutation that restores all-gathered key rows to global order, and the communicator.
struct RankPlan {
  std::vector<int64_t> rows;          // global row of each local row, as the rank computes
  std::vector<int64_t> gather_order;  // global row of each all-gathered key row
  std::vector<int64_t> own_rows;      // global rows whose data the rank really holds
  HostComm* comm = nullptr;           // nullptr: a single rank holding every row
};

struct RankOutput {
  TensorD scores;  // [Tq, Tp] or empty
  TensorI topk;
  TensorD O, O_lat, lse, kl, dq_nope, dq_pe, dq_I, dw;  // local rows
  TensorD dc, dk_pe, dk_I;                              // local rows, reduced over ranks
  TensorD dW_UK, dW_UV;                                 // reduced over ranks
  double loss = 0;
};

template <class P>
class Rank {
  using R = typename P::Real;

 public:
  Rank(const Problem& p, const StreamLayout& L, const Inputs& in, const RunOptions& opt, const RankPlan& plan)
      : p_(p), d_(p.dims), L_(L), opt_(opt), plan_(plan), vis_{L, opt.plant} {
    Tq_ = static_cast<int64_t>(plan.rows.size());
    Tp_ = L.tp;
    CR_ = d_.C + d_.R;
    Kw_ = topk_width(p.topk, Tp_);
    s_ = static_cast<R>(p.softmax_scale);
    const auto& own = plan.own_rows;
    q_nope_ = gather_rows<R>(in.q_nope, own);
    q_pe_ = gather_rows<R>(in.q_pe, own);
    q_I_ = gather_rows<R>(in.q_I, own);
    w_ = gather_rows<R>(in.w, own);
    dO_ = gather_rows<R>(in.dO, own);
    W_UK_ = as_matrix<R>(in.W_UK, d_.H * d_.Dn, d_.C);
    W_UV_ = as_matrix<R>(in.W_UV, d_.H * d_.Dv, d_.C);
    c_ = all_gather_keys(in.c);
    k_pe_ = all_gather_keys(in.k_pe);
    k_I_ = all_gather_keys(in.k_I);
    // Small problems run on one thread: idle OpenMP workers spin between the many short parallel
    // regions below (and each CP rank thread has a team of its own), which made smoke-sized cases
    // 3-15x slower on 2 cores than running them serially.
    const double work = double(Tq_) * double(std::min(Tp_, p.topk)) * double(d_.H) * double(CR_) +
                        double(Tq_) * double(Tp_) * double(d_.HI) * double(d_.DI);
    parallel_ = work >= 1e8;
  }

  RankOutput run() {
    RankOutput out;
    indexer(out);
    select_keys();
    if (p_.path == Path::absorbed) project_queries();
    else materialize_explicit_keys();
    attention_forward(out);
    loss(out);
    if (opt_.attention_backward) attention_backward(out);
    return out;
  }

 private:
  // ---- communication -------------------------------------------------------------------------

  // Keys of every rank, all-gathered in rank order and restored to global order 0..Tp-1.
  Mat<R> all_gather_keys(const TensorD& t) {
    const int64_t cols = t.row_size();
    if (!plan_.comm) return as_matrix<R>(t, Tp_, cols);
    std::vector<double> send(plan_.own_rows.size() * cols), recv(Tp_ * cols);
    for (size_t i = 0; i < plan_.own_rows.size(); ++i)
      std::copy_n(t.row(plan_.own_rows[i]), cols, send.data() + i * cols);
    plan_.comm->allgather(send.data(), recv.data(), static_cast<int64_t>(send.size()));
    Mat<R> m(Tp_, cols);
    for (int64_t i = 0; i < Tp_; ++i)
      for (int64_t j = 0; j < cols; ++j) m(plan_.gather_order[i], j) = static_cast<R>(recv[i * cols + j]);
    return m;
  }

  // Partial key gradients over all Tp rows -> this rank's own rows, summed over ranks.
  TensorD reduce_scatter_keys(const Mat<R>& partial) {
    const int64_t cols = partial.cols();
    TensorD out({Tq_, cols});
    if (!plan_.comm) {
      MatMap<double>(out.data.data(), Tq_, cols) = partial.template cast<double>();
      return out;
    }
    std::vector<double> send(Tp_ * cols);
    for (int64_t i = 0; i < Tp_; ++i)
      for (int64_t j = 0; j < cols; ++j) send[i * cols + j] = partial(plan_.gather_order[i], j);
    if (opt_.plant == Plant::no_key_grad_reduce_scatter) {
      const int64_t off = plan_.comm->rank() * Tq_ * cols;
      std::copy_n(send.data() + off, Tq_ * cols, out.data.data());
    } else {
      plan_.comm->reduce_scatter(send.data(), out.data.data(), Tq_ * cols);
    }
    return out;
  }

  void all_reduce(double* buf, int64_t n) {
    if (plan_.comm) plan_.comm->allreduce_sum(buf, n);
  }

  // ---- indexer and top-k (SPEC.md §3–§4) -----------------------------------------------------

  R phi(R u) const { return p_.relu ? std::max(u, R(0)) : u; }
  R dphi(R u) const {
    if (!p_.relu) return R(1);
    if (u == R(0)) return opt_.plant == Plant::relu_grad_one_at_zero ? R(1) : R(0);
    return u > R(0) ? R(1) : R(0);
  }

  // u[t, h] = k_I[key t] · q_I[g, h] for the given keys; scores I = φ(u)·w[g].
  Mat<R> indexer_u(int64_t i, const std::vector<int64_t>& keys) const {
    Mat<R> kI(static_cast<int64_t>(keys.size()), d_.DI);
    for (size_t j = 0; j < keys.size(); ++j) kI.row(j) = k_I_.row(keys[j]);
    Eigen::Map<const Mat<R>> qI(q_I_.row(i).data(), d_.HI, d_.DI);
    return kI * qI.transpose();
  }
  Vec<R> indexer_scores(int64_t i, const Mat<R>& u) const {
    Vec<R> out(u.rows());
    for (int64_t t = 0; t < u.rows(); ++t) {
      R acc = 0;
      for (int64_t h = 0; h < d_.HI; ++h) acc += w_(i, h) * phi(u(t, h));
      out(t) = acc;
    }
    return out;
  }

  std::vector<int64_t> visible_keys(int64_t g) const {
    std::vector<int64_t> keys;
    for (int64_t t = vis_.begin(g); t < vis_.end(g); ++t) keys.push_back(t);
    return keys;
  }

  void indexer(RankOutput& out) {
    const bool want_scores = Tp_ * Tp_ <= opt_.max_score_elements;
    if (want_scores) out.scores = TensorD({Tq_, Tp_}, kNegInf);
    out.topk = TensorI({Tq_, Kw_}, -1);
#pragma omp parallel for schedule(static, 1) if (parallel_)
    for (int64_t i = 0; i < Tq_; ++i) {
      const int64_t g = plan_.rows[i];
      const auto keys = visible_keys(g);
      const Vec<R> I = indexer_scores(i, indexer_u(i, keys));
      std::vector<double> sc(I.data(), I.data() + I.size());
      const int64_t begin = keys.empty() ? 0 : keys.front();
      topk_canonical(sc.data(), static_cast<int64_t>(sc.size()), begin, Kw_, out.topk.row(i), opt_.plant);
      if (want_scores) std::copy(sc.begin(), sc.end(), out.scores.row(i) + begin);
    }
    topk_ = &out.topk;
  }

  // S(g): the valid, visible keys of the attention's index row, as a sorted set (SPEC.md §5).
  void select_keys() {
    S_.assign(Tq_, {});
    for (int64_t i = 0; i < Tq_; ++i) {
      const int64_t g = plan_.rows[i];
      const int32_t* row = opt_.attention_indices ? opt_.attention_indices->row(plan_.own_rows[i]) : topk_->row(i);
      const int64_t width = opt_.attention_indices ? opt_.attention_indices->row_size() : Kw_;
      for (int64_t j = 0; j < width; ++j)
        if (int64_t t = vis_.attention_key(g, row[j]); t >= 0) S_[i].push_back(t);
      std::sort(S_[i].begin(), S_[i].end());
      S_[i].erase(std::unique(S_[i].begin(), S_[i].end()), S_[i].end());
    }
  }

  // ---- attention (SPEC.md §5–§6) -------------------------------------------------------------

  void project_queries() {
    Qt_.resize(Tq_, d_.H * CR_);
    for (int64_t h = 0; h < d_.H; ++h) {
      Qt_.middleCols(h * CR_, d_.C) = q_nope_.middleCols(h * d_.Dn, d_.Dn) * W_UK_.middleRows(h * d_.Dn, d_.Dn);
      Qt_.middleCols(h * CR_ + d_.C, d_.R) = q_pe_.middleCols(h * d_.R, d_.R);
    }
    bf_inplace<P>(Qt_);
  }

  void materialize_explicit_keys() {
    k_nope_.resize(Tp_, d_.H * d_.Dn);
    v_.resize(Tp_, d_.H * d_.Dv);
    for (int64_t h = 0; h < d_.H; ++h) {
      k_nope_.middleCols(h * d_.Dn, d_.Dn) = c_ * W_UK_.middleRows(h * d_.Dn, d_.Dn).transpose();
      v_.middleCols(h * d_.Dv, d_.Dv) = c_ * W_UV_.middleRows(h * d_.Dv, d_.Dv).transpose();
    }
    bf_inplace<P>(k_nope_);
    bf_inplace<P>(v_);
  }

  Mat<R> gather_K(const std::vector<int64_t>& keys) const {
    Mat<R> K(static_cast<int64_t>(keys.size()), CR_);
    for (size_t j = 0; j < keys.size(); ++j) K.row(j) << c_.row(keys[j]), k_pe_.row(keys[j]);
    return K;
  }

  // logit[h, j] = s · Q~[g,h] · K~[keys[j]]  (explicit: s·(q_nope·k_nope + q_pe·k_pe)).
  Mat<R> logits(int64_t i, const std::vector<int64_t>& keys) const {
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

  static R row_lse(const Eigen::Ref<const Vec<R>>& x) {
    if (x.size() == 0) return -std::numeric_limits<R>::infinity();
    const R m = x.maxCoeff();
    return m + std::log((x.array() - m).exp().sum());
  }

  void attention_forward(RankOutput& out) {
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
        Pb.row(h) = (l.row(h).array() - lse_(i, h)).exp().unaryExpr([](R x) { return P::bf(x); });
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

  void attention_backward(RankOutput& out) {
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
    const R s_dq = opt_.plant == Plant::dq_missing_scale ? R(1) : s_;

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
        if (opt_.plant == Plant::base2_lse_backward) lse = static_cast<R>(lse / std::log(2.0));
        Pf.row(h) = (l.row(h).array() - lse).exp();
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
      if (opt_.plant == Plant::dlogit_missing_delta) delta.setZero();
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

  static TensorD round_out(TensorD t) {
    for (double& x : t.data) x = static_cast<double>(P::bf(static_cast<R>(x)));
    return t;
  }

  // ---- indexer loss (SPEC.md §7) -------------------------------------------------------------

  void loss(RankOutput& out) {
    out.kl = TensorD({Tq_});
    out.dq_I = TensorD({Tq_, d_.HI, d_.DI});
    out.dw = TensorD({Tq_, d_.HI});
    out.dk_I = TensorD({Tq_, d_.DI});
    if (p_.loss == LossMode::off) return;

    int64_t counted_local = 0;
    for (int64_t g : plan_.rows) counted_local += L_.active(g) ? 1 : 0;
    double counted[1] = {static_cast<double>(counted_local)};
    all_reduce(counted, 1);
    double N = std::max(1.0, counted[0]);
    if (opt_.plant == Plant::loss_per_rank_mean)
      N = std::max<double>(1.0, static_cast<double>(counted_local)) * (plan_.comm ? plan_.comm->size() : 1);
    const R scale = static_cast<R>(p_.coeff / N);

    const bool sparse = p_.loss == LossMode::sparse;
    const bool streaming = sparse && opt_.streaming_kl;
    const int64_t chunk = std::max<int64_t>(1, opt_.kl_chunk_rows);
    const int64_t last_chunk_begin = (Tq_ - 1) / chunk * chunk;
    const int nthreads = parallel_ ? omp_get_max_threads() : 1;
    std::vector<Mat<R>> dkI(nthreads, Mat<R>::Zero(Tp_, d_.DI));
    Mat<R> dqI = Mat<R>::Zero(Tq_, d_.HI * d_.DI), dw = Mat<R>::Zero(Tq_, d_.HI);
    Vec<R> kl = Vec<R>::Zero(Tq_);

    // The streaming form walks chunks of rows; each row's work is independent, so the chunk is
    // only a bound on live memory here. Its A_h reuses the attention's lse instead of a softmax.
    for (int64_t c0 = 0; c0 < Tq_; c0 += chunk) {
      if (streaming && opt_.plant == Plant::streaming_kl_drop_last_chunk && c0 == last_chunk_begin) break;
      const int64_t c1 = streaming ? std::min(Tq_, c0 + chunk) : Tq_;
#pragma omp parallel for schedule(static, 1) if (parallel_)
      for (int64_t i = c0; i < c1; ++i) {
        const int64_t g = plan_.rows[i];
        if (!L_.active(g)) continue;
        const std::vector<int64_t> keys = sparse ? S_[i] : visible_keys(g);
        if (keys.empty()) continue;
        const int64_t n = static_cast<int64_t>(keys.size());
        Mat<R> A = logits(i, keys);
        for (int64_t h = 0; h < d_.H; ++h) {
          const R norm = streaming ? lse_(i, h) : row_lse(A.row(h).transpose());
          A.row(h) = (A.row(h).array() - norm).exp();
        }
        Vec<R> T = A.colwise().sum().transpose();
        T /= std::max(T.sum(), R(1e-10));

        const Mat<R> u = indexer_u(i, keys);
        const Vec<R> I = indexer_scores(i, u);
        const Vec<R> logQ = I.array() - row_lse(I);
        const Vec<R> Q = logQ.array().exp();
        Vec<R> dI(n);
        if (opt_.plant == Plant::kl_reversed) {
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

        const int tid = omp_get_thread_num();
        Eigen::Map<const Mat<R>> qI(q_I_.row(i).data(), d_.HI, d_.DI);
        Mat<R> du(n, d_.HI);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t h = 0; h < d_.HI; ++h) {
            dw(i, h) += dI(t) * phi(u(t, h));
            du(t, h) = P::bf(dI(t) * w_(i, h) * dphi(u(t, h)));
          }
        Mat<R> kI(n, d_.DI);
        for (int64_t t = 0; t < n; ++t) kI.row(t) = k_I_.row(keys[t]);
        Eigen::Map<Mat<R>>(dqI.row(i).data(), d_.HI, d_.DI) = du.transpose() * kI;
        const Mat<R> dk = du * qI;
        for (int64_t t = 0; t < n; ++t) dkI[tid].row(keys[t]) += dk.row(t);
      }
      if (!streaming) break;
    }
    for (int t = 1; t < nthreads; ++t) dkI[0] += dkI[t];

    // Each rank contributes coeff·Σ KL / N; with the global N the contributions sum to L.
    double contrib[1] = {p_.coeff * static_cast<double>(kl.template cast<double>().sum()) / N};
    all_reduce(contrib, 1);
    out.loss = static_cast<double>(static_cast<R>(contrib[0]));
    bf_inplace<P>(dqI);
    bf_inplace<P>(dw);
    out.kl = to_tensor<R>(kl.transpose(), {Tq_});
    out.dq_I = to_tensor<R>(dqI, {Tq_, d_.HI, d_.DI});
    out.dw = to_tensor<R>(dw, {Tq_, d_.HI});
    out.dk_I = round_out(reduce_scatter_keys(dkI[0]));
  }

  const Problem& p_;
  const Dims& d_;
  const StreamLayout& L_;
  const RunOptions& opt_;
  const RankPlan& plan_;
  Visibility vis_;
  int64_t Tq_ = 0, Tp_ = 0, CR_ = 0, Kw_ = 0;
  R s_ = 0;
  bool parallel_ = true;
  Mat<R> q_nope_, q_pe_, q_I_, w_, dO_, W_UK_, W_UV_;  // query side (own rows) and weights
  Mat<R> c_, k_pe_, k_I_;                              // keys, global order
  Mat<R> k_nope_, v_;                                  // explicit path only
  Mat<R> Qt_, O_lat_, lse_, O_;
  const TensorI* topk_ = nullptr;
  std::vector<std::vector<int64_t>> S_;
};

RankOutput run_rank(const Problem& p, const StreamLayout& L, const Inputs& in, const RunOptions& opt,
                    const RankPlan& plan) {
  if (opt.precision == Precision::exact) return Rank<ExactPolicy>(p, L, in, opt, plan).run();
  return Rank<Bf16Policy>(p, L, in, opt, plan).run();
}

void check_run(const Problem& p, const StreamLayout& L, const Inputs& in, const RunOptions& opt) {
  validate(p);
  check_shapes(in, p.dims, L.tp);
  if (opt.attention_indices) {
    const Shape want = {L.tp, topk_width(p.topk, L.tp)};
    require(opt.attention_indices->shape == want, "indices",
            "must have shape " + shape_str(want) + ", got " + shape_str(opt.attention_indices->shape));
  }
}

// Writes local row i of a rank's [Tq, ...] tensor into global row g of a [Tp, ...] tensor.
template <class T>
void place_rows(const Tensor<T>& local, const std::vector<int64_t>& rows, Tensor<T>& global) {
  if (local.data.empty()) return;
  if (global.data.empty()) {
    Shape s = local.shape;
    s[0] = static_cast<int64_t>(global.shape.empty() ? 0 : global.shape[0]);
    global = Tensor<T>(s);
  }
  const int64_t n = local.row_size();
  for (size_t i = 0; i < rows.size(); ++i) std::copy_n(local.row(i), n, global.row(rows[i]));
}

Result assemble(const StreamLayout& L, const std::vector<RankOutput>& ranks,
                const std::vector<std::vector<int64_t>>& own_rows) {
  Result r;
  auto global_rows = [&](const TensorD& t) {
    if (t.shape.empty()) return TensorD();  // a stage not run (attention_backward = false)
    Shape s = t.shape;
    s[0] = L.tp;
    return TensorD(s);
  };
  const RankOutput& r0 = ranks[0];
  if (!r0.scores.data.empty()) r.scores = TensorD({L.tp, L.tp}, kNegInf);
  r.topk = TensorI({L.tp, r0.topk.shape[1]}, -1);
  TensorD* g[] = {&r.O, &r.O_lat, &r.lse, &r.kl, &r.dq_nope, &r.dq_pe, &r.dq_I, &r.dw, &r.dc, &r.dk_pe, &r.dk_I};
  const TensorD RankOutput::*l[] = {&RankOutput::O,     &RankOutput::O_lat, &RankOutput::lse,
                                     &RankOutput::kl,    &RankOutput::dq_nope, &RankOutput::dq_pe,
                                     &RankOutput::dq_I,  &RankOutput::dw,   &RankOutput::dc,
                                     &RankOutput::dk_pe, &RankOutput::dk_I};
  for (size_t k = 0; k < std::size(g); ++k) *g[k] = global_rows(r0.*l[k]);
  for (size_t q = 0; q < ranks.size(); ++q) {
    if (r.scores) place_rows(ranks[q].scores, own_rows[q], *r.scores);
    place_rows(ranks[q].topk, own_rows[q], r.topk);
    for (size_t k = 0; k < std::size(g); ++k) place_rows(ranks[q].*l[k], own_rows[q], *g[k]);
  }
  r.dW_UK = r0.dW_UK;
  r.dW_UV = r0.dW_UV;
  r.loss = TensorD({1}, r0.loss);
  return r;
}

// The rows a rank computes with: its real rows, or the rows a planted layout bug makes it believe.
std::vector<std::vector<int64_t>> believed_rows(const Problem& p, const StreamLayout& L, Plant plant) {
  auto rows = L.rank_rows;
  const int64_t cp = L.cp;
  if (plant == Plant::zigzag_chunk_swap && L.kind == Layout::zigzag) {
    for (int64_t r = 0; r < cp; ++r) {
      rows[r].clear();
      for (int64_t s = 0; s < L.segments(); ++s) {
        const int64_t h = (L.cu[s + 1] - L.cu[s]) / (2 * cp);
        for (int64_t chunk : {2 * cp - 1 - r, r})
          for (int64_t i = 0; i < h; ++i) rows[r].push_back(L.cu[s] + chunk * h + i);
      }
    }
  }
  if (plant == Plant::contiguous_read_as_zigzag && L.kind == Layout::contiguous && L.tp % (2 * cp) == 0) {
    const int64_t h = L.tp / (2 * cp);
    for (int64_t r = 0; r < cp; ++r) {
      rows[r].clear();
      for (int64_t chunk : {r, 2 * cp - 1 - r})
        for (int64_t i = 0; i < h; ++i) rows[r].push_back(chunk * h + i);
    }
  }
  (void)p;
  return rows;
}

}  // namespace

Result run_core(const Problem& p, const Inputs& in, const RunOptions& opt) {
  const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
  check_run(p, L, in, opt);
  RankPlan plan;
  plan.rows.resize(L.tp);
  std::iota(plan.rows.begin(), plan.rows.end(), 0);
  plan.own_rows = plan.rows;
  plan.gather_order = plan.rows;
  std::vector<RankOutput> out;
  out.push_back(run_rank(p, L, in, opt, plan));
  return assemble(L, out, {plan.own_rows});
}

Result run_core_sharded(const Problem& p, const Inputs& in, const RunOptions& opt) {
  const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
  check_run(p, L, in, opt);
  const int cp = static_cast<int>(L.cp);
  const auto believed = believed_rows(p, L, opt.plant);
  std::vector<int64_t> gather_order;
  for (auto& rows : believed) gather_order.insert(gather_order.end(), rows.begin(), rows.end());

  LocalHostGroup group(cp);
  std::vector<RankOutput> outs(cp);
  std::vector<std::exception_ptr> errors(cp);
  std::vector<RankPlan> plans(cp);
  const int threads_per_rank = std::max(1, omp_get_max_threads() / cp);
  std::vector<std::thread> threads;
  for (int r = 0; r < cp; ++r) {
    plans[r] = {believed[r], gather_order, L.rank_rows[r], &group.comm(r)};
    threads.emplace_back([&, r] {
      omp_set_num_threads(threads_per_rank);
      try {
        outs[r] = run_rank(p, L, in, opt, plans[r]);
      } catch (...) {
        errors[r] = std::current_exception();  // a throwing rank would deadlock the others; none throws after validation
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return assemble(L, outs, L.rank_rows);
}

}  // namespace dsa
