// The comparison over outputs the GPU oracle kept on its device (Oracle::compare_held) against
// compare_tensor over the same outputs brought to the host: the same verdict, failure class and
// worst element, and the same maxima and counts, on a backend result with a failure of each kind
// planted (an unwritten element, a NaN, an inf, a masked pad row not 0, one large error). Without
// a CUDA device it skips. The same again from the backend's outputs sent up ahead.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <utility>

#include "check/compare.hpp"
#include "check/gpu/gpu_oracle.hpp"
#include "check/gpu/oracle_gpu.hpp"
#include "core/bf16.hpp"

namespace dsa {
namespace {

// Two sequences over cp 2 with masked pad rows: every row kind, and pad rows that must be 0.
PreparedCase padded_case() {
  Problem p;
  p.seqlens = {7, 12};
  p.cp.size = 2;
  p.pad_rows = PadRows::masked;
  p.topk = 5;
  const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
  Inputs in = zero_inputs(p.dims, L.tp);
  std::mt19937 gen(5);
  std::normal_distribution<double> nd(0.0, 0.5);
  in.for_each([&](const std::string&, TensorD& t) {
    for (double& x : t.data) x = round_bf16(nd(gen));
  });
  return prepare(p, in, std::nullopt, {std::begin(kStages), std::end(kStages)});
}

TensorD& member(Result& r, const std::string& name) {
  TensorD* out = nullptr;
  r.for_each_float([&](const std::string& n, TensorD& t) {
    if (n == name) out = &t;
  });
  return *out;
}

void expect_same(const TensorCheck& a, const TensorCheck& b) {
  const std::string& n = b.tensor;
  EXPECT_EQ(a.status, b.status) << n << ": " << a.detail << " | " << b.detail;
  EXPECT_EQ(a.failure, b.failure) << n;
  EXPECT_EQ(a.detail, b.detail) << n;
  EXPECT_EQ(a.e_f, b.e_f) << n;
  EXPECT_EQ(a.e_l, b.e_l) << n;
  EXPECT_EQ(a.floor, b.floor) << n;
  EXPECT_EQ(a.max_rel, b.max_rel) << n;
  EXPECT_EQ(a.compared, b.compared) << n;
  ASSERT_EQ(a.worst.has_value(), b.worst.has_value()) << n;
  if (a.worst) {
    EXPECT_EQ(a.worst->index, b.worst->index) << n;
  }
  EXPECT_TRUE(std::isnan(b.worst_lowp) ? std::isnan(a.worst_lowp) : a.worst_lowp == b.worst_lowp) << n;
  EXPECT_EQ(a.worst_exact, b.worst_exact) << n;
  EXPECT_NEAR(a.rmse, b.rmse, 1e-12 * (1 + b.rmse)) << n;  // sums: another order of addition
  EXPECT_NEAR(a.cosine, b.cosine, 1e-12) << n;
}

TEST(GpuHeldComparison, SameVerdictAndFiguresAsTheHostPass) {
  if (!gpu_oracle_available()) GTEST_SKIP() << "no CUDA device: the GPU oracle needs one";
  const PreparedCase c = padded_case();
  const StreamLayout& L = c.layout;
  auto oracle = make_gpu_oracle(/*hold_min_elements=*/1);
  ASSERT_TRUE(oracle->holds_outputs());
  const Result idx = oracle->run(c, Precision::exact, {true, false, std::nullopt});
  const StageRequest held{false, true, idx.topk, true};
  Result x = oracle->run(c, Precision::exact, held), l = oracle->run(c, Precision::bf16, held);
  EXPECT_TRUE(x.O.empty() && x.dq_nope.empty() && l.dc.empty()) << "held outputs are not returned";
  EXPECT_FALSE(x.kl.empty()) << "KL comes back: the loss is its sum";
  // The host's copies of the held tensors (not a second run: the key gradients' atomic sums need
  // not repeat bit for bit).
  for (auto [r, p] : {std::pair{&x, Precision::exact}, std::pair{&l, Precision::bf16}})
    r->for_each_float([&, p = p](const std::string& n, TensorD& t) {
      if (auto h = oracle->fetch_held(n, p)) t = std::move(*h);
    });

  Result f = l;  // the bf16 policy as the backend, then one failure of each kind
  member(f, "O").data[3] = unwritten_value();
  member(f, "dq_nope").data[17] = std::numeric_limits<double>::quiet_NaN();
  member(f, "dq_pe").data[5] = std::numeric_limits<double>::infinity();
  member(f, "dW_UV").data[40] += 0.5;
  TensorD& dc = member(f, "dc");
  for (int64_t g = 0; g < L.tp; ++g)
    if (!L.is_real(g)) {
      dc.row(g)[1] = 0.25;  // a masked pad row must be exactly 0
      break;
    }

  int held_compared = 0;
  std::as_const(x).for_each_float([&](const std::string& n, const TensorD& xt) {
    if (n == "loss" || n == "kl") return;
    SCOPED_TRACE(n);
    const std::optional<TensorCheck> on_device = oracle->compare_held(n, member(f, n), L, 0);
    ASSERT_TRUE(on_device.has_value());
    expect_same(*on_device, compare_tensor(n, member(f, n), member(l, n), xt, L, 0));
    ++held_compared;
    // Not finite where the host counts it too (lse of the masked pad rows is −inf).
    int64_t host_bad = 0, host_bad_no_inf = 0;
    for (double v : xt.data) host_bad += !std::isfinite(v), host_bad_no_inf += !std::isfinite(v) && v != -INFINITY;
    EXPECT_EQ(oracle->held_exact_nonfinite(n, false), host_bad);
    EXPECT_EQ(oracle->held_exact_nonfinite(n, true), host_bad_no_inf);
  });
  EXPECT_GE(held_compared, 11);
  // The backend's outputs sent up ahead, beside the runs (upload_backend_outputs): the same checks
  // from those copies; a second batch sent up and released unused.
  oracle->upload_backend_outputs(f);
  std::as_const(x).for_each_float([&](const std::string& n, const TensorD& xt) {
    if (n == "loss" || n == "kl") return;
    SCOPED_TRACE(n + ", uploaded ahead");
    const std::optional<TensorCheck> on_device = oracle->compare_held(n, member(f, n), L, 0);
    ASSERT_TRUE(on_device.has_value());
    expect_same(*on_device, compare_tensor(n, member(f, n), member(l, n), xt, L, 0));
  });
  oracle->upload_backend_outputs(f);
  // A tensor the backend did not produce, and one of the wrong shape: as on the host.
  expect_same(*oracle->compare_held("O_lat", TensorD(), L, 0), compare_tensor("O_lat", TensorD(), l.O_lat, x.O_lat, L, 0));
  expect_same(*oracle->compare_held("dk_I", TensorD({2, 3}), L, 0),
              compare_tensor("dk_I", TensorD({2, 3}), l.dk_I, x.dk_I, L, 0));
  oracle->release_held();
  EXPECT_FALSE(oracle->compare_held("O", f.O, L, 0).has_value()) << "released";
  EXPECT_FALSE(oracle->fetch_held("O", Precision::exact).has_value());
}

}  // namespace
}  // namespace dsa
