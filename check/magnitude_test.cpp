// The floors' magnitudes (check/magnitude.hpp). indexer_score_magnitude: equal to the brute-force
// maximum over the visible pairs, above every exact score's sum of absolute terms, and blind to
// keys no row sees. kl_magnitude: above Σ_t T·(|log T| + |log Q|) of every exact KL row.
// loss_grad_magnitudes: the brute-force maxima of their formulas, and above the exact dw, dq_I.
#include "check/magnitude.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "check/prepared_testing.hpp"
#include "reference/core.hpp"
#include "reference/indexer_row.hpp"

namespace dsa {
namespace {

double brute_force(const Inputs& in, const StreamLayout& L) {
  const int64_t HI = in.q_I.shape[1], DI = in.q_I.shape[2];
  double m = 0;
  for (int64_t g = 0; g < L.tp; ++g)
    for (int64_t t = L.key_begin(g); t < L.key_end(g); ++t) {
      double k = 0, s = 0;
      for (int64_t d = 0; d < DI; ++d) k += in.k_I.row(t)[d] * in.k_I.row(t)[d];
      for (int64_t h = 0; h < HI; ++h) {
        double q = 0;
        for (int64_t d = 0; d < DI; ++d) q += in.q_I.row(g)[h * DI + d] * in.q_I.row(g)[h * DI + d];
        s += std::fabs(in.w.row(g)[h]) * std::sqrt(q) * std::sqrt(k);
      }
      m = std::max(m, s);
    }
  return m;
}

TEST(ScoreMagnitude, IsTheLargestBoundOverVisiblePairs) {
  const PreparedCase c = test::small_case({5, 11, 1, 9}, 4, 3);
  const double m = indexer_score_magnitude(c.inputs, c.layout);
  EXPECT_NEAR(m, brute_force(c.inputs, c.layout), 1e-12 * m);
  EXPECT_GT(m, 0);
  // Above the sum of absolute terms, hence above |I|, of every visible pair.
  const int64_t HI = c.inputs.q_I.shape[1], DI = c.inputs.q_I.shape[2];
  for (int64_t g = 0; g < c.layout.tp; ++g) {
    const std::vector<double> I = indexer_score_row(c.problem, c.inputs, c.layout, g, Precision::exact);
    for (int64_t t = c.layout.key_begin(g); t < c.layout.key_end(g); ++t) {
      double terms = 0;
      for (int64_t h = 0; h < HI; ++h) {
        double dot = 0;
        for (int64_t d = 0; d < DI; ++d) dot += std::fabs(c.inputs.q_I.row(g)[h * DI + d] * c.inputs.k_I.row(t)[d]);
        terms += std::fabs(c.inputs.w.row(g)[h]) * dot;
      }
      EXPECT_LE(terms, m * (1 + 1e-12)) << g << " " << t;
      EXPECT_LE(std::fabs(I[t - c.layout.key_begin(g)]), terms * (1 + 1e-12)) << g << " " << t;
    }
  }
}

// Masked pad rows (cp 2) see no key and are seen by none: huge or NaN-poisoned values there leave
// M as it was.
TEST(ScoreMagnitude, RowsAndKeysNoPairReachesDoNotCount) {
  Problem p;
  p.seqlens = {7, 6};
  p.cp.size = 2;
  p.pad_rows = PadRows::masked;
  p.topk = 4;
  const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
  int64_t pads = 0;
  for (int64_t g = 0; g < L.tp; ++g) pads += !L.is_real(g);
  ASSERT_GT(pads, 0) << "the layout must have pad rows";
  Inputs in = zero_inputs(p.dims, L.tp);
  std::mt19937 gen(5);
  std::normal_distribution<double> nd(0.0, 0.5);
  in.for_each([&](const std::string&, TensorD& t) {
    for (double& x : t.data) x = nd(gen);
  });
  const double clean = indexer_score_magnitude(in, L);
  EXPECT_NEAR(clean, brute_force(in, L), 1e-12 * clean);
  for (double poison : {1e6, std::nan("")}) {
    Inputs dirty = in;
    for (int64_t g = 0; g < L.tp; ++g)
      if (!L.is_real(g)) {
        std::fill(dirty.k_I.row(g), dirty.k_I.row(g) + dirty.k_I.row_size(), poison);
        std::fill(dirty.q_I.row(g), dirty.q_I.row(g) + dirty.q_I.row_size(), poison);
        std::fill(dirty.w.row(g), dirty.w.row(g) + dirty.w.row_size(), poison);
      }
    EXPECT_EQ(indexer_score_magnitude(dirty, L), clean) << poison;
  }
}

// The exact oracle's T and Q rows are not a Result; the bound is checked on distributions built
// here: T and Q over the n keys row g sees, KL and the absolute terms summed in fp64.
TEST(KlMagnitude, BoundsTheAbsoluteTermsOfEveryRow) {
  const PreparedCase c = test::small_case({1, 6, 13}, 4, 6);
  const StreamLayout& L = c.layout;
  std::mt19937 gen(9);
  std::normal_distribution<double> nd(0.0, 3.0);
  TensorD kl({L.tp});
  std::vector<double> terms(L.tp, 0.0);
  for (int64_t g = 0; g < L.tp; ++g) {
    const int64_t n = L.key_end(g) - L.key_begin(g);
    std::vector<double> T(n), Q(n);
    double st = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i) st += T[i] = std::exp(nd(gen)), sq += Q[i] = std::exp(nd(gen));
    for (int64_t i = 0; i < n; ++i) {
      T[i] /= st, Q[i] /= sq;
      kl.data[g] += T[i] * (std::log(T[i]) - std::log(Q[i]));
      terms[g] += T[i] * (std::fabs(std::log(T[i])) + std::fabs(std::log(Q[i])));
    }
  }
  const double m = kl_magnitude(kl, L);
  for (int64_t g = 0; g < L.tp; ++g) EXPECT_LE(terms[g], m * (1 + 1e-12)) << g;
  // A row of one key (KL 0, terms 0) adds nothing; a non-finite row is left out.
  kl.data[0] = std::nan("");
  EXPECT_EQ(kl_magnitude(kl, L), m);
  EXPECT_EQ(kl_magnitude(TensorD({L.tp}), L) > 0, true) << "2·ln n of the rows with keys";
}

double max_abs(const TensorD& t) {
  double m = 0;
  for (double x : t.data) m = std::max(m, std::fabs(x));
  return m;
}

double norm(const double* v, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += v[i] * v[i];
  return std::sqrt(s);
}

// Over every row g with keys, every head h and every visible key t, summed the plain way.
LossGradMagnitudes brute_force_grads(const Inputs& in, const StreamLayout& L, double coeff_over_N) {
  const int64_t HI = in.q_I.shape[1], DI = in.q_I.shape[2];
  LossGradMagnitudes m;
  for (int64_t g = 0; g < L.tp; ++g)
    for (int64_t t = L.key_begin(g); t < L.key_end(g); ++t) {
      double row = 0;
      for (int64_t h = 0; h < HI; ++h) {
        const double q = norm(in.q_I.row(g) + h * DI, DI), k = norm(in.k_I.row(t), DI);
        const double w = std::fabs(in.w.row(g)[h]);
        m.dw = std::max(m.dw, 2 * coeff_over_N * q * k);
        m.dq_I = std::max(m.dq_I, 2 * coeff_over_N * w * k);
        row += w * q;
      }
      m.dk_I = std::max(m.dk_I, 2 * coeff_over_N * row);
    }
  return m;
}

TEST(LossGradMagnitude, IsTheLargestBoundOverVisiblePairsAndBoundsTheExactGradients) {
  for (const LossMode mode : {LossMode::sparse, LossMode::dense}) {
    PreparedCase c = test::small_case({5, 11, 1, 9}, 4, 7);
    c.problem.loss = mode;
    c.problem.coeff = 0.7;
    const StreamLayout& L = c.layout;
    const double coeff_over_N = c.problem.coeff / double(L.counted_rows());
    const LossGradMagnitudes m = loss_grad_magnitudes(indexer_magnitudes(c.inputs, L), coeff_over_N);
    const LossGradMagnitudes b = brute_force_grads(c.inputs, L, coeff_over_N);
    EXPECT_NEAR(m.dw, b.dw, 1e-12 * m.dw);
    EXPECT_NEAR(m.dq_I, b.dq_I, 1e-12 * m.dq_I);
    EXPECT_NEAR(m.dk_I, b.dk_I, 1e-12 * m.dk_I);
    EXPECT_GT(m.dw, 0);
    // dw and dq_I of one row are each within their bound; a key's dk_I sums many rows' shares.
    RunOptions opt;
    opt.precision = Precision::exact;
    const Result r = run_core(c.problem, L, c.inputs, opt);
    ASSERT_FALSE(r.dw.empty());
    EXPECT_GT(max_abs(r.dw), 0.0);
    EXPECT_LE(max_abs(r.dw), m.dw);
    EXPECT_LE(max_abs(r.dq_I), m.dq_I);
    // Scaled with coeff/N, and 0 without a loss.
    EXPECT_NEAR(loss_grad_magnitudes(indexer_magnitudes(c.inputs, L), 2 * coeff_over_N).dw, 2 * m.dw, 1e-12 * m.dw);
    EXPECT_EQ(loss_grad_magnitudes(indexer_magnitudes(c.inputs, L), 0.0).dk_I, 0.0);
  }
}

}  // namespace
}  // namespace dsa
