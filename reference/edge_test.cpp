// Edge cases of SPEC.md §2–§5 and §10: empty rows, injected invalid and duplicate indices, the
// canonical top-k of the indexer (width, −1 slots, ties), the indexer scores themselves, and the
// worked example of §1 run through the core.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <random>
#include <set>

#include "reference/core.hpp"
#include "reference/test_util.hpp"

namespace dsa {
namespace {
namespace edge_test {  // its own names in a unity build (README "Layout of the source")

constexpr double kRel = 1e-12;

bool all_finite(const TensorD& t) {
  for (double x : t.data)
    if (!std::isfinite(x)) return false;
  return true;
}

struct EdgeCase {
  Precision precision;
  Path path;
  PadRows pad;
};

class Edge : public ::testing::TestWithParam<EdgeCase> {
 protected:
  void SetUp() override {
    p = test::small_problem({6, 9}, test::tiny_dims(), 4);
    p.path = GetParam().path;
    p.pad_rows = GetParam().pad;
    L = test::layout_of(p);  // rows 0-5, 6-15 (pad 15)
    in = test::random_inputs(p.dims, L.tp, 61);
    opt.precision = GetParam().precision;
    opt.attention_indices = run_core(p, in, {}).topk;
  }
  Problem p;
  StreamLayout L;
  Inputs in;
  RunOptions opt;
};

TEST_P(Edge, EmptyRowsGiveZeroOutputMinusInfLseAndFiniteGradients) {
  TensorI& idx = *opt.attention_indices;
  const std::vector<int64_t> empty = {0, 3, 7, 12};
  for (int64_t g : empty) std::fill_n(idx.row(g), idx.row_size(), -1);
  // A row whose slots are all invalid is empty too (its first block of indices is all invalid).
  const int32_t invalid[] = {INT_MIN, int32_t(L.tp), 11, -5};  // 11 is in the future of row 10
  std::copy_n(invalid, idx.row_size(), idx.row(10));
  const Result r = run_core(p, in, opt);
  for (int64_t g : {0L, 3L, 7L, 10L, 12L}) {
    for (const TensorD* t : {&r.O, &r.O_lat, &r.dq_nope, &r.dq_pe})
      for (int64_t j = 0; j < t->row_size(); ++j) ASSERT_EQ(t->row(g)[j], 0.0) << "row " << g;
    for (int64_t h = 0; h < p.dims.H; ++h) EXPECT_EQ(r.lse.at(g, h), -INFINITY) << "row " << g;
    EXPECT_EQ(r.kl.at(g), 0.0);  // the sparse loss has an empty support
  }
  for (auto* t : {&r.O, &r.O_lat, &r.kl, &r.loss, &r.dq_nope, &r.dq_pe, &r.dW_UK, &r.dW_UV, &r.dc, &r.dk_pe,
                  &r.dq_I, &r.dk_I, &r.dw})
    EXPECT_TRUE(all_finite(*t));
  int64_t infs = 0;
  for (double x : r.lse.data) infs += std::isinf(x) ? 1 : (std::isnan(x) ? 1000 : 0);
  const int64_t masked_pads = p.pad_rows == PadRows::masked ? 1 : 0;  // row 15
  EXPECT_EQ(infs, (5 + masked_pads) * p.dims.H);
  // Empty rows still count in N under attend (SPEC.md §7): L = coeff·Σ KL / N.
  double sum = 0;
  for (double x : r.kl.data) sum += x;
  const double N = L.counted_rows();
  EXPECT_EQ(N, p.pad_rows == PadRows::attend ? 16 : 15);
  const double tol = opt.precision == Precision::exact ? 1e-14 : 1e-6;
  EXPECT_NEAR(r.loss.data[0], p.coeff * sum / N, tol * std::abs(r.loss.data[0]));
}

// Every −1 slot of `clean` replaced by an index that must be ignored.
TensorI inject_invalid(const TensorI& clean, const StreamLayout& L, uint64_t seed) {
  TensorI dirty = clean;
  std::mt19937_64 rng(seed);
  for (int64_t g = 0; g < L.tp; ++g)
    for (int64_t j = 0; j < dirty.row_size(); ++j) {
      int32_t& x = dirty.row(g)[j];
      if (x != -1) continue;
      std::vector<int64_t> bad = {-1, INT_MIN, L.tp, L.tp + 1, INT_MAX, -7};
      if (g + 1 < L.tp) bad.push_back(g + 1 + rng() % (L.tp - g - 1));  // the future (maybe another segment)
      if (L.seg[g] > 0) bad.push_back(L.key_begin(g) - 1 - rng() % L.key_begin(g));  // an earlier segment
      if (!L.active(g)) bad.push_back(L.key_begin(g) + rng() % (g - L.key_begin(g) + 1));  // masked pad row: all invisible
      x = static_cast<int32_t>(bad[rng() % bad.size()]);
    }
  return dirty;
}

TEST_P(Edge, InjectedInvalidIndicesAreIgnored) {
  RunOptions clean = opt;
  for (int64_t g = 0; g < L.tp; ++g)
    if (g % 3 == 0) clean.attention_indices->row(g)[g % 4] = -1;  // room for more injections
  RunOptions dirty = clean;
  dirty.attention_indices = inject_invalid(*clean.attention_indices, L, 3);
  int injected = 0;
  for (int64_t i = 0; i < dirty.attention_indices->size(); ++i)
    injected += dirty.attention_indices->data[i] != clean.attention_indices->data[i];
  EXPECT_GT(injected, 10);
  EXPECT_TRUE(test::results_close(run_core(p, in, dirty), run_core(p, in, clean), kRel));
}

TEST_P(Edge, DuplicateIndicesCountOnce) {
  RunOptions dup = opt;
  int copies = 0;
  for (int64_t g = 0; g < L.tp; ++g) {
    int32_t* row = dup.attention_indices->row(g);
    for (int64_t j = 1; j < dup.attention_indices->row_size(); ++j)
      if (row[j] == -1 && row[0] >= 0) row[j] = row[0], ++copies;
    if (row[1] >= 0) row[0] = row[1], ++copies;  // also overwrite a valid slot: row 0 loses its best key
  }
  EXPECT_GT(copies, 5);
  // The reference for the duplicated rows: the same sets written without repeats.
  RunOptions set = dup;
  for (int64_t g = 0; g < L.tp; ++g) {
    int32_t* row = set.attention_indices->row(g);
    std::set<int32_t> seen;
    for (int64_t j = 0; j < set.attention_indices->row_size(); ++j)
      if (!seen.insert(row[j]).second) row[j] = -1;
  }
  EXPECT_TRUE(test::results_close(run_core(p, in, dup), run_core(p, in, set), kRel));
}

INSTANTIATE_TEST_SUITE_P(Cases, Edge,
                         ::testing::Values(EdgeCase{Precision::exact, Path::absorbed, PadRows::attend},
                                           EdgeCase{Precision::exact, Path::explicit_, PadRows::masked},
                                           EdgeCase{Precision::bf16, Path::absorbed, PadRows::masked},
                                           EdgeCase{Precision::bf16, Path::explicit_, PadRows::attend}),
                         [](const auto& i) {
                           return std::string(name(i.param.precision)) + "_" + name(i.param.path) + "_" +
                                  name(i.param.pad);
                         });

// The indexer scores of SPEC.md §3 from naive loops, and the canonical top-k of §4 over them.
TEST(Indexer, ScoresAndCanonicalTopk) {
  for (bool relu : {true, false})
    for (PadRows pr : {PadRows::attend, PadRows::masked}) {
      Problem p = test::small_problem({1, 13, 4}, test::tiny_dims(), 6);
      p.relu = relu, p.pad_rows = pr;
      const StreamLayout L = test::layout_of(p);  // Tp = 2 + 14 + 4 = 20
      Inputs in = test::random_inputs(p.dims, L.tp, 71);
      for (int64_t h = 0; h < p.dims.HI; ++h) in.w.at(5, h) = std::abs(in.w.at(5, h));  // ties at 0 in row 5
      for (int64_t d = 0; d < p.dims.DI; ++d) in.k_I.at(8, d) = 0;  // u = 0 exactly for key 8
      const Result r = run_core(p, in, {});
      ASSERT_TRUE(r.scores.has_value());
      ASSERT_EQ(r.topk.shape, (Shape{L.tp, 6}));
      int ties = 0;
      for (int64_t g = 0; g < L.tp; ++g) {
        std::vector<std::pair<double, int64_t>> want;  // (−score, key): sorts score desc, lower key first
        for (int64_t t = 0; t < L.tp; ++t) {
          if (!L.visible(g, t)) {
            EXPECT_EQ(r.scores->at(g, t), -INFINITY) << g << "," << t;
            continue;
          }
          double I = 0;
          for (int64_t h = 0; h < p.dims.HI; ++h) {
            double u = 0;
            for (int64_t d = 0; d < p.dims.DI; ++d) u += in.q_I.at(g, h, d) * in.k_I.at(t, d);
            I += in.w.at(g, h) * (relu ? std::max(u, 0.0) : u);
          }
          EXPECT_NEAR(r.scores->at(g, t), I, kRel * (1 + std::abs(I))) << g << "," << t;
          want.push_back({-r.scores->at(g, t), t});
        }
        std::sort(want.begin(), want.end());
        for (size_t j = 1; j < want.size(); ++j) ties += want[j].first == want[j - 1].first;
        for (int64_t j = 0; j < 6; ++j) {
          const int64_t expect = j < int64_t(want.size()) ? want[j].second : -1;
          EXPECT_EQ(r.topk.at(g, j), expect) << "row " << g << " slot " << j;
        }
      }
      if (relu) {
        EXPECT_GT(ties, 5) << "the ReLU case must exercise ties at 0";
      }
    }
}

TEST(Indexer, WidthIsMinOfKAndTp) {
  Problem p = test::small_problem({3, 2}, test::tiny_dims(), 50);
  const StreamLayout L = test::layout_of(p);  // Tp = 4 + 2 = 6
  const Result r = run_core(p, test::random_inputs(p.dims, L.tp, 2), {});
  EXPECT_EQ(r.topk.shape, (Shape{6, 6}));
  for (int64_t g = 0; g < L.tp; ++g) {
    const int64_t visible = L.key_end(g) - L.key_begin(g);
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(r.topk.at(g, j) >= 0, j < visible) << g << " " << j;
  }
}

// u = 0 exactly (an all-zero k_I or q_I row) sits on the ReLU kink, where φ'(0) = 0 (SPEC.md §3):
// that key's dk_I row and that query's dq_I row get no gradient; with φ = identity they do.
TEST(Indexer, ReluDerivativeIsZeroAtTheKink) {
  for (LossMode loss : {LossMode::sparse, LossMode::dense})
    for (bool relu : {true, false}) {
      Problem p = test::small_problem({12}, test::tiny_dims(), 6);
      p.relu = relu, p.loss = loss;
      const StreamLayout L = test::layout_of(p);
      Inputs in = test::random_inputs(p.dims, L.tp, 91);
      const int64_t key = 2, query = 9;
      for (int64_t d = 0; d < p.dims.DI; ++d) in.k_I.at(key, d) = 0;
      for (int64_t h = 0; h < p.dims.HI; ++h)
        for (int64_t d = 0; d < p.dims.DI; ++d) in.q_I.at(query, h, d) = 0;
      RunOptions opt;
      opt.attention_indices = TensorI({L.tp, 6}, -1);  // every row selects its first six visible keys
      for (int64_t g = 0; g < L.tp; ++g)
        for (int64_t j = 0; j < 6 && j <= g; ++j) opt.attention_indices->at(g, j) = int32_t(j);
      const Result r = run_core(p, in, opt);
      double dk = 0, dq = 0;
      for (int64_t d = 0; d < p.dims.DI; ++d) dk = std::max(dk, std::abs(r.dk_I.at(key, d)));
      for (int64_t h = 0; h < p.dims.HI; ++h)
        for (int64_t d = 0; d < p.dims.DI; ++d) dq = std::max(dq, std::abs(r.dq_I.at(query, h, d)));
      if (relu) {
        EXPECT_EQ(dk, 0.0) << name(loss);
        EXPECT_EQ(dq, 0.0) << name(loss);
      } else {
        EXPECT_GT(dk, 0.0) << name(loss);
        EXPECT_GT(dq, 0.0) << name(loss);
      }
      EXPECT_GT(test::max_abs(r.dk_I), 0.0);
    }
}

// SPEC.md §1's worked example through the core: zigzag, cp = 2, L = [5, 11].
TEST(WorkedExample, QuerySeventeenSeesKeysEightToSeventeen) {
  for (PadRows pr : {PadRows::attend, PadRows::masked}) {
    Problem p = test::small_problem({5, 11}, test::tiny_dims(), 16);
    p.cp.size = 2, p.pad_rows = pr;
    const StreamLayout L = test::layout_of(p);
    ASSERT_EQ(L.tp, 20);
    const Inputs in = test::random_inputs(p.dims, L.tp, 81);
    const Result r = run_core_sharded(p, in, {});
    auto keys = [&](int64_t g) {
      std::set<int64_t> s;
      for (int64_t j = 0; j < r.topk.row_size(); ++j)
        if (r.topk.at(g, j) >= 0) s.insert(r.topk.at(g, j));
      return s;
    };
    std::set<int64_t> want;
    for (int64_t t = 8; t <= 17; ++t) want.insert(t);
    EXPECT_EQ(keys(17), want);
    for (int64_t g : {5, 6, 7, 19}) {
      if (pr == PadRows::masked) {
        EXPECT_TRUE(keys(g).empty()) << g;
        EXPECT_EQ(r.lse.at(g, 0), -INFINITY) << g;
        EXPECT_EQ(r.O.at(g, 0, 0), 0.0) << g;
      } else {
        EXPECT_EQ(int64_t(keys(g).size()), g - L.key_begin(g) + 1) << g;  // pad rows attend causally
        EXPECT_TRUE(std::isfinite(r.lse.at(g, 0))) << g;
      }
    }
  }
}

}  // namespace edge_test
}  // namespace
}  // namespace dsa
