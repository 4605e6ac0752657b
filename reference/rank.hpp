// One rank of the reference DSA core (SPEC.md §3–§7): some query rows (all of them when not
// sharded) and every key in global order, written once over a precision policy (precision.hpp).
// The math lives beside this file, one header per stage: indexer.hpp (scores, top-k, S(g)),
// attention.hpp (sparse MLA forward and backward), loss.hpp (the indexer KL). core.cpp runs it.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <new>
#include <vector>

#include "core/tensor_memory.hpp"
#include "core/trace.hpp"
#include "reference/comm.hpp"
#include "reference/core.hpp"
#include "reference/eigen_maps.hpp"
#include "reference/precision.hpp"
#include "reference/visibility.hpp"

namespace dsa::detail {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

template <class R>
using Mat = RowMat<R>;
template <class R>
using Vec = Eigen::Matrix<R, Eigen::Dynamic, 1>;

// A matrix in tensor memory (core/tensor_memory.hpp). Eigen allocates with malloc, so the hundreds
// of MB of Q~, O_lat, the input copies and the key-gradient partials came back from the kernel as
// fresh pages on every run, to be faulted in and zeroed again: a third of the forward at S = 1024
// on a 2-core VM, huge pages and all. Large blocks of tensor memory are kept between runs (the
// oracle's cases) and are already mapped; every block is 64-byte aligned (the rounding of Eigen's
// vectorized sums depends on it). An Eigen::Map over its own block (re-pointed by placement new,
// the way Eigen documents); resize leaves the contents undefined, and an expression assigned to it
// must have its size.
template <class R>
class Held : public Eigen::Map<Mat<R>> {
  using Map = Eigen::Map<Mat<R>>;

 public:
  Held() : Map(nullptr, 0, 0) {}
  Held(int64_t rows, int64_t cols) : Held() { resize(rows, cols); }
  Held(const Held&) = delete;
  Held(Held&& o) noexcept : Map(o.data(), o.rows(), o.cols()), bytes_(o.bytes_) { o.forget(); }
  Held& operator=(Held&& o) noexcept {
    if (this != &o) {
      release();
      point(o.data(), o.rows(), o.cols());
      bytes_ = o.bytes_;
      o.forget();
    }
    return *this;
  }
  ~Held() { release(); }
  using Map::operator=;  // values of an expression of the same size

  void resize(int64_t rows, int64_t cols) {
    const size_t bytes = static_cast<size_t>(rows * cols) * sizeof(R);
    if (bytes != bytes_) {
      release();
      point(bytes ? static_cast<R*>(tensor_allocate(bytes)) : nullptr, 0, 0);
      bytes_ = bytes;
    }
    point(this->data(), rows, cols);
  }
  static Held zero(int64_t rows, int64_t cols) {
    Held m(rows, cols);
    m.setZero();
    return m;
  }

 private:
  void point(R* p, int64_t rows, int64_t cols) { new (static_cast<Map*>(this)) Map(p, rows, cols); }
  void forget() {
    point(nullptr, 0, 0);
    bytes_ = 0;
  }
  void release() {
    if (bytes_) tensor_deallocate(this->data(), bytes_);
    forget();
  }
  size_t bytes_ = 0;
};

// Copies of whole tensors (inputs in, outputs out) are memory-bound loops over hundreds of MB at
// production shapes: on one thread they were a tenth of the 16-core reference's time. Large ones
// run over the OpenMP threads, row by row (a copy: the same bits on any thread count).
inline bool copy_in_parallel(int64_t elements) { return elements >= (int64_t(1) << 20); }

// Rows `rows` of a [T, ...] tensor as a [rows.size(), row_size] matrix of R.
template <class R>
Held<R> gather_rows(const TensorD& t, const std::vector<int64_t>& rows) {
  const int64_t n = static_cast<int64_t>(rows.size()), cols = t.row_size();
  Held<R> m(n, cols);
#pragma omp parallel for schedule(static) if (copy_in_parallel(n * cols))
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < cols; ++j) m(i, j) = static_cast<R>(t.row(rows[i])[j]);
  return m;
}

template <class R>
Held<R> as_matrix(const TensorD& t, int64_t rows, int64_t cols) {
  Held<R> m(rows, cols);
#pragma omp parallel for schedule(static) if (copy_in_parallel(rows * cols))
  for (int64_t i = 0; i < rows; ++i) m.row(i) = ConstMatMap<double>(t.data.data() + i * cols, 1, cols).cast<R>();
  return m;
}

// Working memory of one thread's row loop: a buffer sized once for the largest row, viewed at
// each row's shape, so that the loop allocates nothing. (Fresh temporaries of a few MiB per row
// came back from the kernel page by page: page faults were a fifth of the run time at S = 1024.)
// Eigen's allocator aligns it as it aligns a matrix: Eigen's vectorized sums start at the first
// aligned element, so a buffer at a varying offset would change the rounding from run to run.
template <class R>
struct Buffer {
  Vec<R> data;
  explicit Buffer(int64_t size) : data(std::max<int64_t>(size, 1)) {}
  Eigen::Map<Mat<R>> as(int64_t rows, int64_t cols) {
    assert(rows * cols <= data.size());
    return {data.data(), rows, cols};
  }
};

// Whether sorted, distinct keys are one run t0, t0+1, …: every visible set, and every S(g) in the
// dense regime, where a row keeps all it sees.
inline bool consecutive(const std::vector<int64_t>& keys) {
  return !keys.empty() && keys.back() - keys.front() + 1 == static_cast<int64_t>(keys.size());
}

// The rows `keys` (sorted, distinct) of a row-major src as an [n, cols] operand of a GEMM: src's
// own rows in place when they are consecutive, else copied into buf. Either way the operand is a
// contiguous row-major block holding the same values, so the products compute the same bits (the
// exact outputs of the corpus kept theirs when this replaced the copy).
template <class R>
Eigen::Map<const Mat<R>> key_rows(const Held<R>& src, const std::vector<int64_t>& keys, Buffer<R>& buf) {
  const int64_t n = static_cast<int64_t>(keys.size()), cols = src.cols();
  if (consecutive(keys)) return {src.row(keys.front()).data(), n, cols};
  auto out = buf.as(n, cols);
  for (int64_t j = 0; j < n; ++j) out.row(j) = src.row(keys[j]);
  return {out.data(), n, cols};
}

// m written into rows row0.. and columns col0.. of a [rows, row_size] tensor, as fp64.
template <class M>
void write_block(TensorD& t, int64_t row0, int64_t col0, const M& m) {
  MatMap<double>(t.data.data(), t.shape[0], t.row_size()).block(row0, col0, m.rows(), m.cols()) =
      m.template cast<double>();
}

// m as a tensor of the given shape (m's rows × cols elements), in fp64.
template <class R, class M>
TensorD to_tensor(const M& m, Shape shape) {
  TensorD t(std::move(shape), Uninitialized{});  // every element written below
  MatMap<double> out(t.data.data(), m.rows(), m.cols());
#pragma omp parallel for schedule(static) if (copy_in_parallel(m.rows() * m.cols()))
  for (int64_t i = 0; i < m.rows(); ++i) out.row(i) = m.row(i).template cast<double>();
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

using RankOutput = RankResult;  // core.hpp: what a rank returns

template <class P>
class Rank {
  using R = typename P::Real;

 public:
  Rank(const Problem& p, const StreamLayout& L, const Inputs& in, const RunOptions& opt, const RankPlan& plan)
      : p_(p), d_(p.dims), L_(L), opt_(opt), plan_(plan), vis_{L, opt.mutant} {
    const TraceSpan span("reference: inputs to matrices");
    Tq_ = static_cast<int64_t>(plan.rows.size());
    Tp_ = L.tp;
    CR_ = d_.C + d_.R;
    Kw_ = topk_width(p.topk, Tp_);
    s_ = static_cast<R>(p.softmax_scale);
    const auto& own = plan.own_rows;
    // Small problems run on one thread: idle OpenMP workers spin between the many short parallel
    // regions below (and each CP rank thread has a team of its own), which made smoke-sized cases
    // 3-15x slower on 2 cores than running them serially.
    const double work = double(Tq_) * double(std::min(Tp_, p.topk)) * double(d_.H) * double(CR_) +
                        double(Tq_) * double(Tp_) * double(d_.HI) * double(d_.DI);
    parallel_ = work >= 1e8;
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
    Kt_.resize(Tp_, CR_);  // K~ = [c ; k_pe], one row per key: gathered with one copy per key
#pragma omp parallel for schedule(static) if (parallel_)
    for (int64_t t = 0; t < Tp_; ++t) {
      Kt_.row(t).head(d_.C) = c_.row(t);
      Kt_.row(t).tail(d_.R) = k_pe_.row(t);
    }
  }

  // Each stage a DSA_TRACE span (core/trace.hpp): where a many-core run stops scaling.
  RankOutput run() {
    RankOutput out;
    if (opt_.indexer) {
      const TraceSpan span("reference: indexer and top-k");
      indexer(out);
    }
    if (!opt_.attention) return out;
    {
      const TraceSpan span("reference: S(g), Q~ projection");
      select_keys();
      if (p_.path == Path::absorbed) project_queries();
      else materialize_explicit_keys();
    }
    {
      const TraceSpan span("reference: attention forward");
      attention_forward(out);
    }
    {
      const TraceSpan span("reference: indexer loss");
      loss(out);
    }
    if (opt_.attention_backward) {
      const TraceSpan span("reference: attention backward");
      attention_backward(out);
    }
    return out;
  }

 private:
  // ---- communication -------------------------------------------------------------------------

  // Keys of every rank, all-gathered in rank order and restored to global order 0..Tp-1.
  Held<R> all_gather_keys(const TensorD& t) {
    const int64_t cols = t.row_size();
    if (!plan_.comm) return as_matrix<R>(t, Tp_, cols);
    const std::vector<int64_t> sent = sent_rows();
    std::vector<double> send(sent.size() * cols), recv(Tp_ * cols);
    for (size_t i = 0; i < sent.size(); ++i) std::copy_n(t.row(sent[i]), cols, send.data() + i * cols);
    plan_.comm->allgather(send.data(), recv.data(), static_cast<int64_t>(send.size()));
    Held<R> m(Tp_, cols);
    const int64_t ranks = plan_.comm->size(), block = Tp_ / ranks;  // every rank holds Tp/cp rows
    for (int64_t i = 0; i < Tp_; ++i) {
      int64_t from = i;  // where in the gathered order row i of recv is believed to come from
      if (opt_.mutant == Mutant::allgather_rank_order_scrambled) from = (i / block + 1) % ranks * block + i % block;
      for (int64_t j = 0; j < cols; ++j) m(plan_.gather_order[from], j) = static_cast<R>(recv[i * cols + j]);
    }
    return m;
  }

  // The rows whose keys this rank contributes to the all-gather, in order: its own rows, or (a
  // planted bug) under zigzag the two chunks of each sequence in swapped order.
  std::vector<int64_t> sent_rows() const {
    std::vector<int64_t> rows = plan_.own_rows;
    if (opt_.mutant != Mutant::zigzag_send_halves_swapped || L_.kind != Layout::zigzag) return rows;
    size_t at = 0;
    for (int64_t s = 0; s < L_.segments(); ++s) {
      const size_t h = static_cast<size_t>((L_.cu[s + 1] - L_.cu[s]) / (2 * L_.cp));
      std::rotate(rows.begin() + at, rows.begin() + at + h, rows.begin() + at + 2 * h);
      at += 2 * h;
    }
    return rows;
  }

  // Partial key gradients over all Tp rows -> this rank's own rows, summed over ranks.
  TensorD reduce_scatter_keys(const Eigen::Ref<const Mat<R>>& partial) {
    const int64_t cols = partial.cols();
    if (!plan_.comm) return to_tensor<R>(partial, {Tq_, cols});
    TensorD out({Tq_, cols});
    std::vector<double> send(Tp_ * cols);
    for (int64_t i = 0; i < Tp_; ++i)
      for (int64_t j = 0; j < cols; ++j) send[i * cols + j] = partial(plan_.gather_order[i], j);
    if (opt_.mutant == Mutant::no_key_grad_reduce_scatter) {
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
  // The element-wise largest of v over ranks, through the sum: each rank's values in their own slots.
  std::vector<double> all_max(const std::vector<double>& v) {
    const int ranks = plan_.comm ? plan_.comm->size() : 1, me = plan_.comm ? plan_.comm->rank() : 0;
    const size_t n = v.size();
    std::vector<double> slots(ranks * n, 0.0);
    std::copy(v.begin(), v.end(), slots.begin() + me * n);
    all_reduce(slots.data(), static_cast<int64_t>(slots.size()));
    std::vector<double> out(v.size(), -std::numeric_limits<double>::infinity());
    for (int r = 0; r < ranks; ++r)
      for (size_t k = 0; k < n; ++k) out[k] = std::max(out[k], slots[r * n + k]);
    return out;
  }

  // ---- indexer and top-k (SPEC.md §3–§4): indexer.hpp ------------------------------------------

  R phi(R u) const { return p_.relu ? std::max(u, R(0)) : u; }
  R dphi(R u) const {
    if (!p_.relu) return R(1);
    if (u == R(0)) return opt_.mutant == Mutant::relu_grad_one_at_zero ? R(1) : R(0);
    return u > R(0) ? R(1) : R(0);
  }
  // u[t,h] = k_I[t]·q_I[g,h] over the keys' gathered k_I rows kI [n, DI]; u is [n, HI].
  void indexer_u(int64_t i, const Eigen::Ref<const Mat<R>>& kI, Eigen::Ref<Mat<R>> u) const;
  Vec<R> indexer_scores(int64_t i, const Eigen::Ref<const Mat<R>>& u) const;  // I = φ(u)·w[g]
  void kink_terms(int64_t i, const std::vector<int64_t>& keys, const Eigen::Ref<const Mat<R>>& u, const Vec<R>& dI,
                  const Eigen::Ref<const Mat<R>>& qI, const Eigen::Ref<const Mat<R>>& kI, double& row_most,
                  std::vector<double>& key_sums) const;  // loss.hpp
  std::vector<int64_t> visible_keys(int64_t g) const;
  int64_t max_visible() const;  // the most keys any local row sees
  void indexer(RankOutput& out);  // scores and the canonical top-k of every local row
  void select_keys();             // S(g): valid, visible keys of the attention's index rows

  // ---- attention (SPEC.md §5–§6): attention.hpp ---------------------------------------------

  void project_queries();            // Q~ = [q_nope·W_UK ; q_pe]
  void materialize_explicit_keys();  // k_nope, v (explicit path)
  // logit = s·Q~[g]·K~ᵀ [H, n] over the keys' gathered K~ rows K [n, C+R] (explicit: from k_nope).
  void logits(int64_t i, const std::vector<int64_t>& keys, const Eigen::Ref<const Mat<R>>& K,
              Eigen::Ref<Mat<R>> out) const;
  static R row_lse(const Eigen::Ref<const Vec<R>>& x) {
    if (x.size() == 0) return -std::numeric_limits<R>::infinity();
    const R m = x.maxCoeff();
    return m + std::log(P::exp(x.array() - m).sum());
  }
  void attention_forward(RankOutput& out);   // O_lat, lse, O
  void attention_backward(RankOutput& out);  // dq_nope, dq_pe, dW_UK, dW_UV, dc, dk_pe
  static constexpr int64_t kBackwardRows = 128;  // query rows per block of the backward
  struct BackwardScratch {                       // one thread's operands of backward_row
    Buffer<R> K, Pf, Pb, dl, dKrows, dVrows;
    DeltaSlack delta;  // the exact run's: the largest over this thread's rows (core/result.hpp)
    // The exact run's key-side Δ slack sums over this thread's rows, per key [Tp]: dc's, dk_pe's.
    std::vector<double> key_nope, key_pe;
    BackwardScratch(int64_t keys, int64_t H, int64_t CR, int64_t C, bool absorbed, int64_t slack_keys)
        : K(keys * CR), Pf(H * keys), Pb(H * keys), dl(H * keys), dKrows(absorbed ? keys * CR : 0),
          dVrows(absorbed ? keys * C : 0), key_nope(slack_keys, 0.0), key_pe(slack_keys, 0.0) {}
  };
  void backward_row(int64_t i, const R* dO_lat_row, R* dQ_row, Held<R>& dK, Held<R>& dV, BackwardScratch& w) const;
  // Row i's terms of the Δ slack (exact runs): dP in dl (not yet dlogit), P in Pf, the gathered K~.
  void delta_terms(int64_t i, const std::vector<int64_t>& keys, const Eigen::Ref<const Mat<R>>& K,
                   const Eigen::Ref<const Mat<R>>& Pf, const Eigen::Ref<const Mat<R>>& dP, const R* dO_lat_row,
                   BackwardScratch& w) const;
  std::vector<double> W_UK_row_norm_;  // max over d of ‖W_UK[h, d, :]‖, per head (absorbed, exact runs)
  std::vector<double> W_UK_col_norm_;  // max over c of ‖W_UK[h, :, c]‖, per head (explicit, exact runs)

  // ---- indexer loss (SPEC.md §7): loss.hpp --------------------------------------------------

  void loss(RankOutput& out);  // kl, loss, dq_I, dk_I, dw

  // Gradients are written rounded to bf16 under the bf16 policy (SPEC.md §8).
  static TensorD round_out(TensorD t) {
    for (double& x : t.data) x = static_cast<double>(P::bf(static_cast<R>(x)));
    return t;
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
  Held<R> q_nope_, q_pe_, q_I_, w_, dO_, W_UK_, W_UV_;  // query side (own rows) and weights
  Held<R> c_, k_pe_, k_I_;                              // keys, global order
  Held<R> Kt_;                                          // K~ = [c ; k_pe], global order
  Held<R> k_nope_, v_;                                  // explicit path only
  Held<R> Qt_, O_lat_, lse_, O_;
  const TensorI* topk_ = nullptr;
  std::vector<std::vector<int64_t>> S_;
  int64_t max_keys_ = 0;  // max |S(g)| over local rows
};

}  // namespace dsa::detail
