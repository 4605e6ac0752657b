// The `cuda` backend end to end through the harness's one comparison routine (run_case: exact and
// lowp oracles, SPEC.md §9): odd shapes, production-like shapes, CP on the local communicator,
// adversarial inputs (run_fused itself: fused/run_test.cpp). Without a device the GPU tests skip and the backend must refuse (exit 3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "harness/backend.hpp"
#include "harness/generate.hpp"
#include "harness/oracle_choice.hpp"
#include "harness/prefetch.hpp"
#include "harness/run_case.hpp"
#include "core/errors.hpp"


namespace dsa {
namespace {

Case make_case(std::vector<int64_t> seqlens, int64_t cp, Layout layout, Dims d, int64_t k, uint64_t seed) {
  Case c;
  c.seed = seed;
  c.problem.seqlens = std::move(seqlens);
  c.problem.cp.size = cp;
  c.problem.cp.layout = layout;
  c.problem.dims = d;
  c.problem.topk = k;
  c.problem.softmax_scale = 1.0 / std::sqrt(double(d.Dn + d.R));
  return c;
}

std::string failures(const CaseVerdict& v) {
  std::string s = std::string(name(v.verdict)) + ": " + v.message;
  for (const auto& ch : v.checks)
    if (ch.failed())
      s += "\n  " + std::string(name(ch.stage)) + "/" + ch.tensor + " " + name(ch.failure) + " e_f=" + std::to_string(ch.e_f) +
           " e_l=" + std::to_string(ch.e_l) + " " + ch.detail;
  return s;
}

TEST(CudaBackend, RefusesWithoutDevice) {
  if (cuda_device_present()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(make_cuda_backend(BackendOptions{}), Unavailable);
}

class CudaCases : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device: the cuda backend runs only on a GPU";
    backend = make_cuda_backend(BackendOptions{"local"});
  }
  void expect_pass(const Case& c) {
    const CaseVerdict v = run_case(c, *backend);
    EXPECT_EQ(v.verdict, Verdict::pass) << describe(c) << "\n" << failures(v);
  }
  std::unique_ptr<Backend> backend;
};

TEST_F(CudaCases, OddShapes) {
  expect_pass(make_case({5, 11}, 1, Layout::zigzag, Dims{3, 5, 8, 40, 7, 2, 16}, 5, 1));
  expect_pass(make_case({17, 0, 9}, 1, Layout::contiguous, Dims{1, 4, 3, 17, 5, 1, 8}, 9, 2));
  expect_pass(make_case({5, 11}, 2, Layout::zigzag, Dims{4, 16, 8, 32, 16, 2, 16}, 8, 3));
  expect_pass(make_case({13, 1, 30}, 4, Layout::contiguous, Dims{5, 8, 16, 48, 8, 3, 32}, 16, 4));
}

TEST_F(CudaCases, MaskedPadsPoisonedKeysAndInjectedIndices) {
  Case c = make_case({7, 12, 3}, 2, Layout::zigzag, Dims{4, 16, 8, 32, 16, 2, 16}, 8, 5);
  c.problem.pad_rows = PadRows::masked;
  c.init.poison_pad_keys = true;
  c.init.inject_indices = true;
  expect_pass(c);
  Case t = make_case({40}, 1, Layout::zigzag, Dims{2, 8, 8, 16, 8, 1, 16}, 16, 6);
  t.init.score_ties = true;
  t.init.zero_rows = true;
  t.init.large_logits = true;
  t.problem.loss = LossMode::dense;
  expect_pass(t);
}

TEST_F(CudaCases, ProductionLikeShapes) {
  expect_pass(make_case({200, 57}, 2, Layout::zigzag, Dims{128, 128, 64, 512, 128, 64, 128}, 64, 7));
  expect_pass(make_case({150}, 1, Layout::contiguous, Dims{64, 192, 64, 512, 256, 32, 128}, 2048, 8));
}

TEST_F(CudaCases, SmokeProfile) {
  for (int i = 0; i < 12; ++i) {
    const Case c = random_case("smoke", 42, i);
    const CaseVerdict v = run_case(c, *backend);
    if (c.problem.path == Path::explicit_)
      EXPECT_EQ(v.verdict, Verdict::cannot_run) << "explicit path must be reported not run, never a pass";
    else
      EXPECT_EQ(v.verdict, Verdict::pass) << describe(c) << "\n" << failures(v);
  }
}

// run_fused has the absorbed path only: fuzz draws random cases from paths(), all of which run.
TEST_F(CudaCases, ImplementsTheAbsorbedPathOnly) {
  ASSERT_EQ(backend->paths(), std::vector<Path>{Path::absorbed});
  for (int i = 0; i < 12; ++i) {
    const Case c = random_case("smoke", 42, i, backend->paths());
    ASSERT_EQ(c.problem.path, Path::absorbed);
    const CaseVerdict v = run_case(c, *backend);
    EXPECT_EQ(v.verdict, Verdict::pass) << describe(c) << "\n" << failures(v);
  }
}

// fuzz --oracle gpu runs each next case's backend while the case before it is judged, and keeps the
// next cases' inputs on the oracle's device as they are prepared (harness/prefetch.hpp): the fused
// backend and the GPU oracle then share the device. The verdicts and every deterministic tensor's
// error (against the exact oracle's values, from the inputs kept ahead) are those of the runs made
// in turn.
TEST_F(CudaCases, RunsAheadBesideTheGpuOracleAsInTurn) {
  const std::unique_ptr<Oracle> oracle = make_oracle("gpu");
  ASSERT_GT(backend_ahead_limit(*oracle), 0);
  std::vector<Case> cases;
  for (int i = 0; i < 8; ++i) cases.push_back(random_case("nightly", 77, i, backend->paths()));
  std::vector<CaseVerdict> in_turn, ahead;
  for (const Case& c : cases) in_turn.push_back(run_case(c, *backend, oracle.get()));
  CasePrefetch prefetch;
  prefetch.run_backends_ahead(*backend, backend_ahead_limit(*oracle), oracle.get());
  for (size_t i = 0; i < cases.size(); ++i) {
    for (size_t k = i + 1; k < std::min(i + 3, cases.size()); ++k) prefetch.start(cases[k]);
    ahead.push_back(run_case(cases[i], *backend, oracle.get(), 1, &prefetch));
  }
  const std::vector<std::string> det = cuda_deterministic_tensors();
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(ahead[i].verdict, in_turn[i].verdict) << describe(cases[i]) << "\n" << failures(ahead[i]);
    ASSERT_EQ(ahead[i].checks.size(), in_turn[i].checks.size());
    for (size_t k = 0; k < ahead[i].checks.size(); ++k)
      if (std::find(det.begin(), det.end(), ahead[i].checks[k].tensor) != det.end())
        EXPECT_EQ(ahead[i].checks[k].e_f, in_turn[i].checks[k].e_f) << "case " << i << " " << ahead[i].checks[k].tensor;
  }
}

}  // namespace
}  // namespace dsa
