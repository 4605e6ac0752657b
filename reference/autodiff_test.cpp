// The attention backward and the indexer loss backward against Eigen's forward-mode AutoDiff.
//
// The forward below is written independently of reference/core.cpp, straight from the formulas of
// SPEC.md §5 and §7 as naive scalar loops, templated on the scalar type. Differentiated with
// AutoDiffScalar it gives the exact gradients up to fp64 rounding, so the bound is tight:
// |g_ad − g| ≤ 1e-12 · max|g| per tensor; the forward values must agree to the same bound.
#include <gtest/gtest.h>
#include <omp.h>

#include <Eigen/Core>
#include <cmath>
#include <unsupported/Eigen/AutoDiff>  // after Eigen/Core, which it needs

#include "reference/core.hpp"
#include "reference/test_util.hpp"

namespace dsa {
namespace {
namespace autodiff_test {  // its own names in a unity build (README "Layout of the source")

using AD = Eigen::AutoDiffScalar<Eigen::VectorXd>;
constexpr double kRel = 1e-12;

double value(double x) { return x; }
double value(const AD& x) { return x.value(); }

// Stable log Σ exp over a list (the max is a constant shift: the derivative is unaffected).
template <class S>
S log_sum_exp(const std::vector<S>& x) {
  using std::exp, std::log;
  double m = -INFINITY;
  for (auto& v : x) m = std::max(m, value(v));
  S acc = S(0.0);
  for (auto& v : x) acc += exp(v - m);
  return log(acc) + m;
}

// Inputs as scalars of type S; the tensors not being differentiated stay constant.
template <class S>
struct Vars {
  std::vector<S> q_nope, q_pe, c, k_pe, W_UK, W_UV, q_I, k_I, w;
};

// Seeds each element of the named tensors with its own derivative direction.
Vars<AD> seed(const Inputs& in, const std::vector<std::string>& wrt, int64_t& n) {
  n = 0;
  in.for_each([&](const std::string& name, const TensorD& t) {
    if (std::find(wrt.begin(), wrt.end(), name) != wrt.end()) n += t.size();
  });
  Vars<AD> v;
  int64_t k = 0;
  auto lift = [&](const std::string& name, const TensorD& t) {
    std::vector<AD> out(t.size());
    const bool active = std::find(wrt.begin(), wrt.end(), name) != wrt.end();
    for (int64_t i = 0; i < t.size(); ++i)
      out[i] = active ? AD(t.data[i], n, k++) : AD(t.data[i], Eigen::VectorXd::Zero(n));
    return out;
  };
  // Same order as Inputs::for_each, so that the derivative index follows the tensor order.
  v.q_nope = lift("q_nope", in.q_nope), v.q_pe = lift("q_pe", in.q_pe), v.c = lift("c", in.c);
  v.k_pe = lift("k_pe", in.k_pe), v.W_UK = lift("W_UK", in.W_UK), v.W_UV = lift("W_UV", in.W_UV);
  v.q_I = lift("q_I", in.q_I), v.k_I = lift("k_I", in.k_I), v.w = lift("w", in.w);
  return v;
}

// Q~[g,h] = [q_nope[g,h]·W_UK[h] ; q_pe[g,h]] and K~[t] = [c[t] ; k_pe[t]] (SPEC.md §5).
template <class S>
std::vector<S> q_tilde(const Vars<S>& v, const Dims& d, int64_t g, int64_t h) {
  std::vector<S> q(d.C + d.R, S(0.0));
  for (int64_t c = 0; c < d.C; ++c)
    for (int64_t k = 0; k < d.Dn; ++k)
      q[c] += v.q_nope[(g * d.H + h) * d.Dn + k] * v.W_UK[(h * d.Dn + k) * d.C + c];
  for (int64_t r = 0; r < d.R; ++r) q[d.C + r] = v.q_pe[(g * d.H + h) * d.R + r];
  return q;
}
template <class S>
S logit(const Vars<S>& v, const Dims& d, double s, const std::vector<S>& q, int64_t t) {
  S acc = S(0.0);
  for (int64_t c = 0; c < d.C; ++c) acc += q[c] * v.c[t * d.C + c];
  for (int64_t r = 0; r < d.R; ++r) acc += q[d.C + r] * v.k_pe[t * d.R + r];
  return s * acc;
}

// Σ dO ⊙ O of the sparse attention over the sets S(g); also returns O and lse.
template <class S>
S attention_objective(const Vars<S>& v, const Problem& p, const TensorD& dO,
                      const std::vector<std::vector<int64_t>>& sets, TensorD* O, TensorD* lse) {
  using std::exp;
  const Dims& d = p.dims;
  S obj = S(0.0);
  for (int64_t g = 0; g < int64_t(sets.size()); ++g)
    for (int64_t h = 0; h < d.H; ++h) {
      if (sets[g].empty()) continue;
      const std::vector<S> q = q_tilde(v, d, g, h);
      std::vector<S> l;
      for (int64_t t : sets[g]) l.push_back(logit(v, d, p.softmax_scale, q, t));
      const S z = log_sum_exp(l);
      lse->at(g, h) = value(z);
      std::vector<S> o_lat(d.C, S(0.0));
      for (size_t j = 0; j < sets[g].size(); ++j) {
        const S P = exp(l[j] - z);
        for (int64_t c = 0; c < d.C; ++c) o_lat[c] += P * v.c[sets[g][j] * d.C + c];
      }
      for (int64_t e = 0; e < d.Dv; ++e) {
        S o = S(0.0);
        for (int64_t c = 0; c < d.C; ++c) o += v.W_UV[(h * d.Dv + e) * d.C + c] * o_lat[c];
        O->at(g, h, e) = value(o);
        obj += dO.at(g, h, e) * o;
      }
    }
  return obj;
}

// The indexer loss L of SPEC.md §7 over supports V(g); the target T is a constant (it is computed
// from the attention inputs in double and carries no derivative).
template <class S>
S loss_objective(const Vars<S>& v, const Vars<double>& cst, const Problem& p, const StreamLayout& L,
                 const std::vector<std::vector<int64_t>>& supports, TensorD* kl_out) {
  using std::exp, std::log;
  const Dims& d = p.dims;
  S total = S(0.0);
  for (int64_t g = 0; g < L.tp; ++g) {
    const auto& V = supports[g];
    if (!L.active(g) || V.empty()) continue;
    const int64_t n = V.size();
    std::vector<double> T(n, 0.0);
    for (int64_t h = 0; h < d.H; ++h) {
      const std::vector<double> q = q_tilde(cst, d, g, h);
      std::vector<double> l;
      for (int64_t t : V) l.push_back(logit(cst, d, p.softmax_scale, q, t));
      const double z = log_sum_exp(l);
      for (int64_t j = 0; j < n; ++j) T[j] += std::exp(l[j] - z);
    }
    double sumT = 0;
    for (double x : T) sumT += x;
    for (double& x : T) x /= std::max(sumT, 1e-10);
    std::vector<S> I(n, S(0.0));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t h = 0; h < d.HI; ++h) {
        S u = S(0.0);
        for (int64_t k = 0; k < d.DI; ++k) u += v.q_I[(g * d.HI + h) * d.DI + k] * v.k_I[V[j] * d.DI + k];
        const S phi = (p.relu && value(u) <= 0) ? S(0.0) : u;
        I[j] += v.w[g * d.HI + h] * phi;
      }
    const S z = log_sum_exp(I);
    S kl = S(0.0);
    for (int64_t j = 0; j < n; ++j)
      if (T[j] > 0) kl += T[j] * (std::log(std::max(T[j], 1e-10)) - (I[j] - z));
    kl_out->at(g) = value(kl);
    total += kl;
  }
  const double N = std::max<int64_t>(1, L.counted_rows());
  return total * (p.coeff / N);
}

std::vector<std::vector<int64_t>> sparse_sets(const StreamLayout& L, const TensorI& idx) {
  std::vector<std::vector<int64_t>> sets(L.tp);
  for (int64_t g = 0; g < L.tp; ++g) {
    for (int64_t j = 0; j < idx.row_size(); ++j) {
      const int64_t t = idx.row(g)[j];
      if (t >= 0 && t < L.tp && L.visible(g, t)) sets[g].push_back(t);
    }
    std::sort(sets[g].begin(), sets[g].end());
    sets[g].erase(std::unique(sets[g].begin(), sets[g].end()), sets[g].end());
  }
  return sets;
}

// The slice of the AD gradient vector that belongs to tensor `name` (seeded in Inputs order).
TensorD grad_slice(const Eigen::VectorXd& g, const Inputs& in, const std::vector<std::string>& wrt,
                   const std::string& name) {
  int64_t off = 0;
  TensorD out;
  in.for_each([&](const std::string& n, const TensorD& t) {
    if (std::find(wrt.begin(), wrt.end(), n) == wrt.end()) return;
    if (n == name) {
      out = TensorD(t.shape);
      for (int64_t i = 0; i < t.size(); ++i) out.data[i] = g(off + i);
    }
    off += t.size();
  });
  return out;
}

struct AdCase {
  Path path;
  PadRows pad;
  LossMode loss;
  bool relu;
};

class AutoDiff : public ::testing::TestWithParam<AdCase> {
 protected:
  void SetUp() override {
    threads_ = omp_get_max_threads();
    omp_set_num_threads(1);
    const AdCase& c = GetParam();
    p = test::small_problem({6, 3}, test::tiny_dims(), 3);
    p.path = c.path, p.pad_rows = c.pad, p.loss = c.loss, p.relu = c.relu;
    L = test::layout_of(p);
    in = test::random_inputs(p.dims, L.tp, 100 + int(c.loss) * 7 + int(c.pad) * 3 + int(c.relu));
    r = run_core(p, in, opt);
  }
  void TearDown() override { omp_set_num_threads(threads_); }
  Problem p;
  StreamLayout L;
  Inputs in;
  RunOptions opt;
  Result r;
  int threads_ = 1;
};

TEST_P(AutoDiff, AttentionBackward) {
  const std::vector<std::string> wrt = {"q_nope", "q_pe", "c", "k_pe", "W_UK", "W_UV"};
  int64_t n = 0;
  const Vars<AD> v = seed(in, wrt, n);
  TensorD O({L.tp, p.dims.H, p.dims.Dv}), lse({L.tp, p.dims.H}, -INFINITY);
  const AD obj = attention_objective(v, p, in.dO, sparse_sets(L, r.topk), &O, &lse);
  EXPECT_TRUE(test::close("O", r.O, O, kRel));
  EXPECT_TRUE(test::close("lse", r.lse, lse, kRel));
  const std::pair<const char*, const TensorD*> grads[] = {{"q_nope", &r.dq_nope}, {"q_pe", &r.dq_pe},
                                                          {"c", &r.dc},           {"k_pe", &r.dk_pe},
                                                          {"W_UK", &r.dW_UK},     {"W_UV", &r.dW_UV}};
  for (auto& [name, g] : grads) {
    const TensorD ad = grad_slice(obj.derivatives(), in, wrt, name);
    EXPECT_GT(test::max_abs(ad), 1e-3) << name;
    EXPECT_TRUE(test::close(std::string("d") + name, *g, ad, kRel));
  }
}

TEST_P(AutoDiff, IndexerLossBackward) {
  const std::vector<std::string> wrt = {"q_I", "k_I", "w"};
  int64_t n = 0;
  const Vars<AD> v = seed(in, wrt, n);
  Vars<double> cst;
  auto values = [](const TensorD& t) { return std::vector<double>(t.data.begin(), t.data.end()); };
  cst.q_nope = values(in.q_nope), cst.q_pe = values(in.q_pe), cst.c = values(in.c), cst.k_pe = values(in.k_pe);
  cst.W_UK = values(in.W_UK), cst.W_UV = values(in.W_UV);
  std::vector<std::vector<int64_t>> supports = sparse_sets(L, r.topk);
  if (p.loss == LossMode::dense)
    for (int64_t g = 0; g < L.tp; ++g) {
      supports[g].clear();
      for (int64_t t = L.key_begin(g); t < L.key_end(g); ++t) supports[g].push_back(t);
    }
  TensorD kl({L.tp});
  const AD loss = loss_objective(v, cst, p, L, supports, &kl);
  EXPECT_TRUE(test::close("kl", r.kl, kl, kRel));
  EXPECT_NEAR(r.loss.data[0], loss.value(), kRel * std::abs(loss.value()));
  const std::pair<const char*, const TensorD*> grads[] = {{"q_I", &r.dq_I}, {"k_I", &r.dk_I}, {"w", &r.dw}};
  for (auto& [name, g] : grads) {
    const TensorD ad = grad_slice(loss.derivatives(), in, wrt, name);
    EXPECT_GT(test::max_abs(ad), 1e-4) << name;
    EXPECT_TRUE(test::close(std::string("d") + name, *g, ad, kRel));
  }
}

// The backward walks query rows in blocks (reference/attention.hpp, 128 rows): a stream of 260
// rows spans three, the last a partial one. The query-side gradients (written block by block) and
// dW_UK (summed over blocks) against AD.
TEST(AutoDiffBlocks, QueryGradientsOverSeveralBackwardBlocks) {
  Problem p = test::small_problem({140, 120}, test::tiny_dims(), 3);
  const StreamLayout L = test::layout_of(p);
  ASSERT_GT(L.tp, 2 * 128);
  const Inputs in = test::random_inputs(p.dims, L.tp, 907);
  const Result r = run_core(p, in, {});
  const std::vector<std::string> wrt = {"q_nope", "q_pe", "W_UK"};
  int64_t n = 0;
  const Vars<AD> v = seed(in, wrt, n);
  TensorD O({L.tp, p.dims.H, p.dims.Dv}), lse({L.tp, p.dims.H}, -INFINITY);
  const AD obj = attention_objective(v, p, in.dO, sparse_sets(L, r.topk), &O, &lse);
  EXPECT_TRUE(test::close("O", r.O, O, kRel));
  const std::pair<const char*, const TensorD*> grads[] = {{"q_nope", &r.dq_nope}, {"q_pe", &r.dq_pe}, {"W_UK", &r.dW_UK}};
  for (auto& [name, g] : grads) {
    const TensorD ad = grad_slice(obj.derivatives(), in, wrt, name);
    EXPECT_GT(test::max_abs(ad), 1e-3) << name;
    EXPECT_TRUE(test::close(std::string("d") + name, *g, ad, kRel));
  }
}

INSTANTIATE_TEST_SUITE_P(Spec, AutoDiff,
                         ::testing::Values(AdCase{Path::absorbed, PadRows::attend, LossMode::sparse, true},
                                           AdCase{Path::explicit_, PadRows::masked, LossMode::dense, true},
                                           AdCase{Path::absorbed, PadRows::masked, LossMode::sparse, false},
                                           AdCase{Path::explicit_, PadRows::attend, LossMode::dense, false}),
                         [](const auto& i) {
                           return std::string(name(i.param.path)) + "_" + name(i.param.pad) + "_" +
                                  name(i.param.loss) + (i.param.relu ? "_relu" : "_identity");
                         });

}  // namespace autodiff_test
}  // namespace
}  // namespace dsa
