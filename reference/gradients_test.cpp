// Every gradient of SPEC.md §6 and §7 against central finite differences in fp64.
//
// Objectives: Σ dO ⊙ O for the six attention gradients (dO is an input), the loss L for the three
// indexer gradients. The sparse support is frozen by passing the base run's top-k as
// RunOptions.attention_indices, so a perturbation cannot flip a selection; with ReLU the case is
// checked to keep every |u| well away from 0, where φ is not differentiable.
//
// Tolerance: |g_fd − g| ≤ 1e-6 · max|g| + 1e-9 per tensor. With step h = 1e-5 on O(1) values the
// central difference has truncation error ~h²·|f'''| ≈ 1e-10 and rounding error ~ε·|f|/h ≈ 1e-10,
// so 1e-6 leaves four orders of margin while a wrong term (missing scale, Δ, coeff/N, transpose)
// is off by O(1).
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>

#include "reference/core.hpp"
#include "reference/test_util.hpp"

namespace dsa {
namespace {
namespace gradients_test {  // its own names in a unity build (README "Layout of the source")

constexpr double kStep = 1e-5, kRel = 1e-6, kAbs = 1e-9;

double dot(const TensorD& a, const TensorD& b) {
  double s = 0;
  for (int64_t i = 0; i < a.size(); ++i) s += a.data[i] * b.data[i];
  return s;
}

// Central differences of f with respect to every element of the named input.
TensorD finite_difference(Inputs in, const std::string& name, const std::function<double(const Inputs&)>& f) {
  TensorD* x = nullptr;
  in.for_each([&](const std::string& n, TensorD& t) {
    if (n == name) x = &t;
  });
  TensorD g(x->shape);
  for (int64_t i = 0; i < x->size(); ++i) {
    const double x0 = x->data[i];
    x->data[i] = x0 + kStep;
    const double fp = f(in);
    x->data[i] = x0 - kStep;
    const double fm = f(in);
    x->data[i] = x0;
    g.data[i] = (fp - fm) / (2 * kStep);
  }
  return g;
}

const TensorD& grad_of(const Result& r, const std::string& input) {
  if (input == "q_nope") return r.dq_nope;
  if (input == "q_pe") return r.dq_pe;
  if (input == "c") return r.dc;
  if (input == "k_pe") return r.dk_pe;
  if (input == "W_UK") return r.dW_UK;
  if (input == "W_UV") return r.dW_UV;
  if (input == "q_I") return r.dq_I;
  if (input == "k_I") return r.dk_I;
  return r.dw;
}

// Smallest |q_I·k_I| over visible (query, key, indexer head) triples.
double min_abs_u(const Problem& p, const Inputs& in) {
  const StreamLayout L = test::layout_of(p);
  double m = INFINITY;
  for (int64_t g = 0; g < L.tp; ++g)
    for (int64_t t = L.key_begin(g); t < L.key_end(g); ++t)
      for (int64_t h = 0; h < p.dims.HI; ++h) {
        double u = 0;
        for (int64_t d = 0; d < p.dims.DI; ++d) u += in.q_I.at(g, h, d) * in.k_I.at(t, d);
        m = std::min(m, std::abs(u));
      }
  return m;
}

struct GradCase {
  Path path;
  PadRows pad;
  LossMode loss;
  bool streaming;
  bool relu;
  uint64_t seed;
};

std::string describe(const ::testing::TestParamInfo<GradCase>& i) {
  const GradCase& c = i.param;
  return std::string(name(c.path)) + "_" + name(c.pad) + "_" + name(c.loss) + (c.streaming ? "_streaming" : "") +
         (c.relu ? "_relu" : "_identity");
}

class Gradients : public ::testing::TestWithParam<GradCase> {
 protected:
  void SetUp() override {
    const GradCase& c = GetParam();
    p = test::small_problem({5, 7, 1}, test::tiny_dims(), 3);  // zigzag cp=1: rows 0-5, 6-13, 14-15
    p.path = c.path;
    p.pad_rows = c.pad;
    p.loss = c.loss;
    p.relu = c.relu;
    L = test::layout_of(p);
    // With ReLU, the first seed from c.seed whose |u| all stay away from the kink at 0.
    uint64_t seed = c.seed;
    in = test::random_inputs(p.dims, L.tp, seed);
    while (c.relu && min_abs_u(p, in) < 1e-3 && seed < c.seed + 100) in = test::random_inputs(p.dims, L.tp, ++seed);
    threads_ = omp_get_max_threads();
    omp_set_num_threads(1);  // hundreds of tiny runs: thread start-up would dominate; restored in TearDown
    opt.streaming_kl = c.streaming;
    opt.kl_chunk_rows = 5;
    opt.attention_indices = run_core(p, in, opt).topk;  // frozen sparse support
    base = run_core(p, in, opt);
  }
  void TearDown() override { omp_set_num_threads(threads_); }
  Problem p;
  StreamLayout L;
  Inputs in;
  RunOptions opt;
  Result base;
  int threads_ = 1;
};

TEST_P(Gradients, AttentionGradientsMatchFiniteDifferences) {
  Problem pa = p;
  pa.loss = LossMode::off;  // the attention objective does not involve the loss
  auto objective = [&](const Inputs& x) { return dot(x.dO, run_core(pa, x, opt).O); };
  int nonzero = 0;
  for (const char* n : {"q_nope", "q_pe", "c", "k_pe", "W_UK", "W_UV"}) {
    const TensorD fd = finite_difference(in, n, objective);
    EXPECT_TRUE(test::close(std::string("d") + n, grad_of(base, n), fd, kRel, kAbs));
    nonzero += test::max_abs(fd) > 1e-3;
  }
  EXPECT_EQ(nonzero, 6) << "every attention gradient must be exercised";
}

TEST_P(Gradients, IndexerGradientsMatchFiniteDifferences) {
  if (p.relu) {
    ASSERT_GT(min_abs_u(p, in), 1e-3) << "a ReLU kink is within reach of the FD step";
  }
  RunOptions fo = opt;
  fo.attention_backward = false;  // the loss and its gradients only
  auto objective = [&](const Inputs& x) { return run_core(p, x, fo).loss.data[0]; };
  ASSERT_GT(std::abs(base.loss.data[0]), 1e-3);
  for (const char* n : {"q_I", "k_I", "w"}) {
    const TensorD fd = finite_difference(in, n, objective);
    EXPECT_TRUE(test::close(std::string("d") + n, grad_of(base, n), fd, kRel, kAbs));
    EXPECT_GT(test::max_abs(fd), 1e-4) << n;
  }
}

// Masked pad rows contribute nothing anywhere (their query-side outputs and gradients are exactly
// zero); under attend they take part like real rows.
TEST_P(Gradients, PadRowsFollowThePolicy) {
  int pads = 0;
  for (int64_t g = 0; g < L.tp; ++g) {
    if (L.is_real(g)) continue;
    ++pads;
    for (const TensorD* t : {&base.dq_nope, &base.dq_pe, &base.dq_I, &base.dw, &base.O, &base.kl}) {
      double m = 0;
      for (int64_t j = 0; j < t->row_size(); ++j) m = std::max(m, std::abs(t->row(g)[j]));
      if (p.pad_rows == PadRows::masked) {
        EXPECT_EQ(m, 0.0) << "masked pad row " << g;
      } else if (t != &base.kl || p.loss == LossMode::dense) {
        EXPECT_GT(m, 0.0) << "attending pad row " << g;
      }
    }
  }
  EXPECT_EQ(pads, 3);
}

// Attend (pad rows take part) and masked (pad rows see nothing), both paths, every loss form.
INSTANTIATE_TEST_SUITE_P(
    Fd, Gradients,
    ::testing::Values(GradCase{Path::absorbed, PadRows::attend, LossMode::sparse, true, true, 11},
                      GradCase{Path::absorbed, PadRows::attend, LossMode::sparse, false, false, 12},
                      GradCase{Path::absorbed, PadRows::masked, LossMode::dense, false, true, 13},
                      GradCase{Path::explicit_, PadRows::attend, LossMode::dense, false, false, 14},
                      GradCase{Path::explicit_, PadRows::masked, LossMode::sparse, true, false, 15}),
    describe);

}  // namespace gradients_test
}  // namespace
}  // namespace dsa
