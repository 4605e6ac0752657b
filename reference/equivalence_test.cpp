// Two computations of the same mathematics must agree to fp64 rounding (SPEC.md §5, §7):
// the absorbed and the explicit (materialized per-head keys and values) attention paths, and the
// streaming sparse KL against the non-streaming one, for several chunk sizes.
//
// Bound: |X_a − X_b| ≤ 1e-12 · max|X_b| per tensor. Both sides are fp64 sums of O(10²) terms of
// O(1) values, so their rounding differences are ~1e-15 relative; a real discrepancy is O(1).
// Top-k is the indexer's (identical in both runs) and must match exactly.
#include <gtest/gtest.h>

#include "reference/core.hpp"
#include "reference/test_util.hpp"

namespace dsa {
namespace {
namespace equivalence_test {  // its own names in a unity build (README "Layout of the source")

constexpr double kRel = 1e-12;

struct EqCase {
  std::vector<int64_t> seqlens;
  PadRows pad;
  LossMode loss;
  int64_t topk;
};

class Equivalence : public ::testing::TestWithParam<EqCase> {
 protected:
  void SetUp() override {
    const EqCase& c = GetParam();
    Dims d = test::tiny_dims();
    d.H = 3, d.Dn = 6, d.Dv = 5, d.C = 12;  // Dn ≠ Dv ≠ C: a transposed weight cannot pass
    p = test::small_problem(c.seqlens, d, c.topk);
    p.pad_rows = c.pad;
    p.loss = c.loss;
    L = test::layout_of(p);
    in = test::random_inputs(d, L.tp, 77 + c.topk);
  }
  Problem p;
  StreamLayout L;
  Inputs in;
};

TEST_P(Equivalence, AbsorbedEqualsExplicit) {
  RunOptions opt;
  p.path = Path::absorbed;
  const Result a = run_core(p, in, opt);
  p.path = Path::explicit_;
  const Result e = run_core(p, in, opt);
  EXPECT_EQ(a.topk.data, e.topk.data);
  EXPECT_TRUE(test::results_close(a, e, kRel));
  EXPECT_GT(test::max_abs(a.dW_UK), 0.0);
}

TEST_P(Equivalence, StreamingSparseKlEqualsSparseKl) {
  if (p.loss != LossMode::sparse) p.loss = LossMode::sparse;
  RunOptions plain;
  plain.streaming_kl = false;
  const Result ref = run_core(p, in, plain);
  ASSERT_GT(ref.loss.data[0], 0.0);
  for (int64_t chunk : {1, 2, 3, 7, 64, 100000}) {
    RunOptions s;
    s.streaming_kl = true;
    s.kl_chunk_rows = chunk;
    const Result r = run_core(p, in, s);
    EXPECT_TRUE(test::close("kl", r.kl, ref.kl, kRel)) << "chunk " << chunk;
    EXPECT_TRUE(test::close("loss", r.loss, ref.loss, kRel)) << "chunk " << chunk;
    EXPECT_TRUE(test::close("dq_I", r.dq_I, ref.dq_I, kRel)) << "chunk " << chunk;
    EXPECT_TRUE(test::close("dk_I", r.dk_I, ref.dk_I, kRel)) << "chunk " << chunk;
    EXPECT_TRUE(test::close("dw", r.dw, ref.dw, kRel)) << "chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Equivalence,
                         ::testing::Values(EqCase{{9, 4, 1, 13}, PadRows::attend, LossMode::sparse, 4},
                                           EqCase{{9, 4, 1, 13}, PadRows::masked, LossMode::dense, 3},
                                           EqCase{{2, 0, 11}, PadRows::attend, LossMode::dense, 64},
                                           EqCase{{17}, PadRows::masked, LossMode::sparse, 2}),
                         [](const auto& i) { return "case" + std::to_string(i.index); });

}  // namespace equivalence_test
}  // namespace
}  // namespace dsa
