// Packed THD semantics (SPEC.md §1–§5): sequences of one stream are independent, rows are causal,
// the order of top-k slots is irrelevant, and a K that covers every visible key turns the sparse
// attention and the sparse loss into their dense counterparts.
//
// Bounds: 1e-12 · max|X| where two runs compute the same sums in another order or grouping
// (different GEMM shapes, another loss normalizer); exact equality where the same row is
// computed from bit-identical operands (causality).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "reference/core.hpp"
#include "reference/test_util.hpp"

namespace dsa {
namespace {
namespace packing_test {  // its own names in a unity build (README "Layout of the source")

constexpr double kRel = 1e-12;

TensorD slice_rows(const TensorD& t, int64_t begin, int64_t n) {
  Shape s = t.shape;
  s[0] = n;
  TensorD out(s);
  std::copy_n(t.row(begin), n * t.row_size(), out.data.begin());
  return out;
}

TensorD scaled(TensorD t, double a) {
  for (double& x : t.data) x *= a;
  return t;
}

bool is_per_token(const std::string& n) { return n != "W_UK" && n != "W_UV"; }

class Packing : public ::testing::TestWithParam<PadRows> {};

TEST_P(Packing, PackedEqualsEverySequenceRunAlone) {
  Problem p = test::small_problem({5, 0, 9, 1, 6}, test::tiny_dims(), 4);
  p.pad_rows = GetParam();
  const StreamLayout L = test::layout_of(p);
  const Inputs in = test::random_inputs(p.dims, L.tp, 21);
  const Result packed = run_core(p, in, {});
  const double Np = std::max<int64_t>(1, L.counted_rows());

  TensorD dW_UK(packed.dW_UK.shape), dW_UV(packed.dW_UV.shape);
  double loss_times_n = 0;
  int alone_runs = 0;
  for (int64_t s = 0; s < L.segments(); ++s) {
    const int64_t b = L.cu[s], n = L.cu[s + 1] - L.cu[s];
    if (n == 0) continue;  // a zero-length sequence has no row
    Problem q = p;
    q.seqlens = {L.lengths[s]};
    const StreamLayout Lq = test::layout_of(q);
    ASSERT_EQ(Lq.tp, n);
    Inputs one = in;
    one.for_each([&](const std::string& name, TensorD& t) {
      if (is_per_token(name)) t = slice_rows(t, b, n);
    });
    const Result alone = run_core(q, one, {});
    ++alone_runs;
    const double Na = std::max<int64_t>(1, Lq.counted_rows());
    const std::string at = " (sequence " + std::to_string(s) + ")";

    // Top-k widths differ (K' = min(K, Tp)); the sets of valid indices must not.
    for (int64_t i = 0; i < n; ++i) {
      std::set<int64_t> a, c;
      for (int64_t j = 0; j < packed.topk.row_size(); ++j)
        if (int64_t t = packed.topk.row(b + i)[j]; t >= 0) a.insert(t - b);
      for (int64_t j = 0; j < alone.topk.row_size(); ++j)
        if (int64_t t = alone.topk.row(i)[j]; t >= 0) c.insert(t);
      EXPECT_EQ(a, c) << "row " << b + i << at;
    }
    for (auto [name, x, y] : {std::tuple{"O", &packed.O, &alone.O}, {"O_lat", &packed.O_lat, &alone.O_lat},
                              {"lse", &packed.lse, &alone.lse}, {"kl", &packed.kl, &alone.kl},
                              {"dq_nope", &packed.dq_nope, &alone.dq_nope}, {"dq_pe", &packed.dq_pe, &alone.dq_pe},
                              {"dc", &packed.dc, &alone.dc}, {"dk_pe", &packed.dk_pe, &alone.dk_pe}})
      EXPECT_TRUE(test::close(name + at, slice_rows(*x, b, n), *y, kRel));
    // The indexer gradients carry coeff/N, and N counts the rows of the whole stream.
    for (auto [name, x, y] : {std::tuple{"dq_I", &packed.dq_I, &alone.dq_I}, {"dk_I", &packed.dk_I, &alone.dk_I},
                              {"dw", &packed.dw, &alone.dw}})
      EXPECT_TRUE(test::close(name + at, scaled(slice_rows(*x, b, n), Np), scaled(*y, Na), kRel));
    for (int64_t i = 0; i < dW_UK.size(); ++i) dW_UK.data[i] += alone.dW_UK.data[i];
    for (int64_t i = 0; i < dW_UV.size(); ++i) dW_UV.data[i] += alone.dW_UV.data[i];
    loss_times_n += alone.loss.data[0] * Na;
  }
  EXPECT_EQ(alone_runs, 4);
  // Weight gradients and the loss are sums over sequences.
  EXPECT_TRUE(test::close("dW_UK", packed.dW_UK, dW_UK, kRel));
  EXPECT_TRUE(test::close("dW_UV", packed.dW_UV, dW_UV, kRel));
  EXPECT_NEAR(packed.loss.data[0] * Np, loss_times_n, kRel * loss_times_n);
}

TEST_P(Packing, FutureRowsDoNotChangeEarlierRows) {
  Problem p = test::small_problem({7, 9}, test::tiny_dims(), 3);
  p.pad_rows = GetParam();
  const StreamLayout L = test::layout_of(p);  // rows 0-7, 8-17
  const Inputs in = test::random_inputs(p.dims, L.tp, 31);
  const int64_t g0 = 10;
  Inputs fut = in;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal;
  fut.for_each([&](const std::string& name, TensorD& t) {
    if (!is_per_token(name)) return;
    const double scale = name == "k_I" ? 1e6 : 3.0;  // huge finite future k_I must not pull selections
    for (int64_t g = g0 + 1; g < L.tp; ++g)
      for (int64_t j = 0; j < t.row_size(); ++j) t.row(g)[j] = test::to_bf16(scale * normal(rng));
  });
  const Result a = run_core(p, in, {}), b = run_core(p, fut, {});
  ASSERT_TRUE(a.scores && b.scores);
  auto rows_equal = [&](const char* name, const auto& x, const auto& y, int64_t upto) {
    for (int64_t g = 0; g <= upto; ++g)
      for (int64_t j = 0; j < x.row_size(); ++j)
        ASSERT_EQ(x.row(g)[j], y.row(g)[j]) << name << " row " << g << " col " << j;
  };
  rows_equal("topk", a.topk, b.topk, g0);
  rows_equal("scores", *a.scores, *b.scores, g0);
  for (auto [name, x, y] : {std::tuple{"O", &a.O, &b.O}, {"O_lat", &a.O_lat, &b.O_lat}, {"lse", &a.lse, &b.lse},
                            {"kl", &a.kl, &b.kl}, {"dq_nope", &a.dq_nope, &b.dq_nope}, {"dq_pe", &a.dq_pe, &b.dq_pe},
                            {"dq_I", &a.dq_I, &b.dq_I}, {"dw", &a.dw, &b.dw}})
    rows_equal(name, *x, *y, g0);
  // Keys of the first sequence are seen only by its own rows, all before g0.
  for (auto [name, x, y] : {std::tuple{"dc", &a.dc, &b.dc}, {"dk_pe", &a.dk_pe, &b.dk_pe}, {"dk_I", &a.dk_I, &b.dk_I}})
    rows_equal(name, *x, *y, L.cu[1] - 1);
  // The perturbation did change the later rows (the test would be vacuous otherwise).
  EXPECT_NE(a.O.row(g0 + 1)[0], b.O.row(g0 + 1)[0]);
}

TEST_P(Packing, PermutingTopkSlotsChangesNothing) {
  Problem p = test::small_problem({6, 11}, test::tiny_dims(), 5);
  p.pad_rows = GetParam();
  const StreamLayout L = test::layout_of(p);
  const Inputs in = test::random_inputs(p.dims, L.tp, 41);
  std::mt19937_64 rng(9);
  for (Path path : {Path::absorbed, Path::explicit_}) {
    p.path = path;
    RunOptions base;
    base.attention_indices = run_core(p, in, {}).topk;
    RunOptions perm = base;
    int moved = 0;
    for (int64_t g = 0; g < L.tp; ++g) {
      int32_t* row = perm.attention_indices->row(g);
      std::shuffle(row, row + perm.attention_indices->row_size(), rng);
      moved += !std::equal(row, row + perm.attention_indices->row_size(), base.attention_indices->row(g));
    }
    EXPECT_GT(moved, L.tp / 2);
    EXPECT_TRUE(test::results_close(run_core(p, in, perm), run_core(p, in, base), kRel)) << name(path);
  }
}

// Dense causal attention over every visible key, naive loops from SPEC.md §5.
void dense_attention(const Problem& p, const StreamLayout& L, const Inputs& in, TensorD& O, TensorD& lse) {
  const Dims& d = p.dims;
  O = TensorD({L.tp, d.H, d.Dv});
  lse = TensorD({L.tp, d.H}, -INFINITY);
  for (int64_t g = 0; g < L.tp; ++g)
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t b = L.key_begin(g), e = L.key_end(g);
      if (b == e) continue;
      std::vector<double> q(d.C + d.R, 0.0), l;
      for (int64_t c = 0; c < d.C; ++c)
        for (int64_t k = 0; k < d.Dn; ++k) q[c] += in.q_nope.at(g, h, k) * in.W_UK.at(h, k, c);
      for (int64_t r = 0; r < d.R; ++r) q[d.C + r] = in.q_pe.at(g, h, r);
      double m = -INFINITY;
      for (int64_t t = b; t < e; ++t) {
        double x = 0;
        for (int64_t c = 0; c < d.C; ++c) x += q[c] * in.c.at(t, c);
        for (int64_t r = 0; r < d.R; ++r) x += q[d.C + r] * in.k_pe.at(t, r);
        l.push_back(p.softmax_scale * x);
        m = std::max(m, l.back());
      }
      double z = 0;
      for (double x : l) z += std::exp(x - m);
      lse.at(g, h) = m + std::log(z);
      std::vector<double> o_lat(d.C, 0.0);
      for (int64_t t = b; t < e; ++t)
        for (int64_t c = 0; c < d.C; ++c) o_lat[c] += std::exp(l[t - b] - lse.at(g, h)) * in.c.at(t, c);
      for (int64_t v = 0; v < d.Dv; ++v)
        for (int64_t c = 0; c < d.C; ++c) O.at(g, h, v) += in.W_UV.at(h, v, c) * o_lat[c];
    }
}

TEST_P(Packing, TopkCoveringEveryVisibleKeyIsDense) {
  for (int64_t K : {10, 1000}) {  // 10 = the longest padded segment; 1000 > Tp
    Problem p = test::small_problem({5, 9, 2}, test::tiny_dims(), K);
    p.pad_rows = GetParam();
    const StreamLayout L = test::layout_of(p);
    const Inputs in = test::random_inputs(p.dims, L.tp, 51);
    p.loss = LossMode::sparse;
    const Result sparse = run_core(p, in, {});
    EXPECT_EQ(sparse.topk.shape, (Shape{L.tp, std::min<int64_t>(K, L.tp)}));
    TensorD O, lse;
    dense_attention(p, L, in, O, lse);
    EXPECT_TRUE(test::close("O", sparse.O, O, kRel)) << "K " << K;
    EXPECT_TRUE(test::close("lse", sparse.lse, lse, kRel)) << "K " << K;
    p.loss = LossMode::dense;
    const Result dense = run_core(p, in, {});
    EXPECT_GT(dense.loss.data[0], 0.0);
    EXPECT_TRUE(test::results_close(sparse, dense, kRel)) << "K " << K;
  }
}

INSTANTIATE_TEST_SUITE_P(Pads, Packing, ::testing::Values(PadRows::attend, PadRows::masked),
                         [](const auto& i) { return std::string(name(i.param)); });

}  // namespace packing_test
}  // namespace
}  // namespace dsa
