// run_fused end to end: CP ranks on the local communicator (several ranks on ONE GPU) give the
// result of one rank, and both stay within the tolerance model of the CPU reference (run_core exact
// and bf16). Also the planted run-level bugs (zigzag_chunk_swap, no_key_grad_reduce_scatter) are
// caught here: they change cp > 1 (and cp = 1 zigzag) results.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "fused/device.hpp"
#include "fused/run.hpp"
#include "reference/core.hpp"
#include "core/errors.hpp"
#include "core/layout.hpp"
#include "core/bf16.hpp"

namespace dsa::fused {
namespace {

Inputs random_inputs(const Problem& p, uint32_t seed) {
  const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
  Inputs in = zero_inputs(p.dims, L.tp);
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  in.for_each([&](const std::string& name, TensorD& t) {
    const double s = name == "W_UK" ? 1.0 / std::sqrt(double(p.dims.Dn)) : name == "W_UV" ? 1.0 / std::sqrt(double(p.dims.C)) : 1.0;
    for (auto& v : t.data) v = round_bf16(s * nd(gen));
  });
  return in;
}

Problem small_problem(int64_t cp) {
  Problem p;
  p.seqlens = {21, 9, 30};
  p.cp.size = cp;
  p.cp.layout = Layout::zigzag;
  p.cp.pad_multiple = 16;  // the same padded stream for every cp ≤ 8
  p.dims = Dims{4, 16, 8, 64, 16, 2, 32};
  p.topk = 12;
  p.softmax_scale = 1.0 / std::sqrt(24.0);
  return p;
}

// max |a − b| over finite elements; ±inf must match exactly; NaN in a fails.
double max_diff(const TensorD& a, const TensorD& b, double* scale) {
  EXPECT_EQ(a.shape, b.shape);
  double d = 0, m = 0;
  for (int64_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_FALSE(std::isnan(a.data[i]));
    if (std::isinf(b.data[i])) {
      EXPECT_EQ(a.data[i], b.data[i]);
      continue;
    }
    d = std::max(d, std::fabs(a.data[i] - b.data[i]));
    m = std::max(m, std::fabs(b.data[i]));
  }
  if (scale) *scale = m;
  return d;
}

const TensorD& tensor(const Result& r, const std::string& name) {
  const TensorD* out = nullptr;
  r.for_each_float([&](const std::string& n, const TensorD& t) {
    if (n == name) out = &t;
  });
  return *out;
}

TEST(RunFused, LocalCpRanksOnOneGpuEqualCp1) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device: run_fused runs only on a GPU";
  const Inputs in = random_inputs(small_problem(1), 11);
  FusedOptions opt;
  opt.comm = CommKind::local;
  const Result one = run_fused(small_problem(1), in, opt);
  for (int64_t cp : {2, 4, 8}) {
    const Result many = run_fused(small_problem(cp), in, opt);
    EXPECT_EQ(many.topk.data, one.topk.data) << "cp=" << cp;
    one.for_each_float([&](const std::string& name, const TensorD& a) {
      double mx = 0;
      const double d = max_diff(tensor(many, name), a, &mx);
      // One bf16 ulp of the largest element: another fp32 summation order may flip a rounding.
      EXPECT_LE(d, mx * std::ldexp(1.0, -7)) << name << " cp=" << cp;
    });
  }
}

// The tolerance model of SPEC.md §9 against run_core, with the fused top-k injected into both
// oracles (decoupled stages): e_f ≤ α·e_l + 1e-6·max|exact|, α = 2 forward, 3 gradients.
TEST(RunFused, WithinToleranceOfCpuReference) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device: run_fused runs only on a GPU";
  for (int64_t cp : {1, 2}) {
    Problem p = small_problem(cp);
    p.loss = cp == 1 ? LossMode::sparse : LossMode::dense;
    const Inputs in = random_inputs(p, 5 + cp);
    FusedOptions fo;
    fo.comm = CommKind::local;
    const Result f = run_fused(p, in, fo);
    RunOptions ex, lo;
    ex.precision = Precision::exact;
    lo.precision = Precision::bf16;
    ex.attention_indices = lo.attention_indices = f.topk;
    const Result e = run_core(p, in, ex), l = run_core(p, in, lo);
    for (const char* name : {"O", "O_lat", "lse", "kl", "loss", "dq_nope", "dq_pe", "dW_UK", "dW_UV", "dc", "dk_pe",
                             "dq_I", "dk_I", "dw"}) {
      double mx = 0;
      const double ef = max_diff(tensor(f, name), tensor(e, name), &mx);
      const double el = max_diff(tensor(l, name), tensor(e, name), nullptr);
      const double alpha = name[0] == 'd' ? 3 : 2;
      EXPECT_LE(ef, alpha * el + 1e-6 * mx) << name << " cp=" << cp << " e_f=" << ef << " e_l=" << el;
    }
  }
}

TEST(RunFused, ExplicitPathIsUnavailable) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device: run_fused runs only on a GPU";
  Problem p = small_problem(1);
  p.path = Path::explicit_;
  EXPECT_THROW(run_fused(p, random_inputs(p, 1)), Unavailable);
}

TEST(RunFused, CommNames) {
  EXPECT_EQ(parse_comm("local"), CommKind::local);
  EXPECT_EQ(parse_comm("nccl"), CommKind::nccl);
  EXPECT_EQ(parse_comm("auto"), CommKind::auto_);
  EXPECT_THROW(parse_comm("mpi"), InvalidInput);
}

}  // namespace
}  // namespace dsa::fused
