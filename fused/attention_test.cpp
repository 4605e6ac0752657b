// The attention kernels alone (key selection, forward, backward) against the CPU reference
// (reference/core.hpp run_core, exact and bf16 policy) on the indices the kernels were given, so
// the comparison is decoupled from the top-k, through check/compare.hpp's compare_tensor
// (SPEC.md §9: e_f ≤ α·e_l + floor). Odd and production-like shapes, every kind of invalid index
// (−1, INT_MIN, Tp, huge, future, an earlier segment's key, a key repeated), empty rows (masked pads and rows
// whose every slot is invalid), a leading block of invalid slots, one-key rows, NaN in the key
// rows no row may see and in the guard regions around every key buffer.
//
// The kernels' outputs are mapped onto the catalogue tensors the host API makes of them, so that
// compare_tensor applies the catalogue's α and pad-row rule: O_lat and lse as they are; dQ~ as
// dq_pe (its rope part) and dq_nope (its nope part times W_UKᵀ, fp32 accumulation, bf16 output:
// what grad_query computes); dK~ (fp32) as dc and dk_pe, rounded to bf16 as the host API writes them.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "check/compare.hpp"
#include "core/bf16.hpp"
#include "fused/attention.hpp"
#include "fused/device.hpp"
#include "fused/indexer_testing.hpp"
#include "reference/core.hpp"

namespace dsa::fused::testing {
namespace {

struct AttnShape {
  int Tq, H, C, R, K;  // Tq: real rows of the stream (pad rows come on top); K: the kernel's slots
};

struct Case {
  AttnShape s;
  Problem p;
  StreamLayout L;
  Inputs in;
  int Tp = 0, D = 0;
  std::vector<int32_t> idx;          // [Tp, K] what the kernels are given
  std::vector<int> usable;           // [Tp] distinct visible keys of g in idx[g] (|S(g)|)
  std::vector<uint16_t> Qt, dO_lat;  // bf16 bits: the projections the bf16 policy's GEMMs write
  Result exact, lowp;                // run_core on the same indices, exact and bf16 policy
};

bool usable_key(const StreamLayout& L, int64_t g, int64_t t) { return t >= 0 && t < L.tp && L.visible(g, t); }

// One long segment first (rows with many keys; row 0 is invisible to every later segment), then
// short ones (1-key rows), each padded to a multiple of 4 with masked pad rows: those are empty
// query rows and key rows nobody may see, which hold NaN on the device. Row kinds of the indices:
// visible keys shuffled with junk between them, a leading block of 40 invalid slots (g % 5 == 2),
// only invalid slots (g % 13 == 3).
Case make_case(AttnShape s, uint32_t seed) {
  Case c;
  c.s = s;
  Dims d;
  d.H = s.H, d.Dn = 16, d.R = s.R, d.C = s.C, d.Dv = 8, d.HI = 1, d.DI = 8;
  Problem& p = c.p;
  p.seqlens = {std::max(1, s.Tq - 8), 1, 2, 1, 4};
  p.cp = CpSpec{1, Layout::zigzag, 4};
  p.pad_rows = PadRows::masked;
  p.dims = d;
  p.topk = s.K;
  p.loss = LossMode::off;
  // Logits of standard deviation 2 (peaked softmax rows); a float, as the kernels take it.
  p.softmax_scale = static_cast<float>(1.0 / std::sqrt(double(s.C + s.R) / 4.0));
  c.L = layout_of(p);
  const StreamLayout& L = c.L;
  c.Tp = static_cast<int>(L.tp);
  c.D = s.C + s.R;
  c.in = random_inputs(d, L.tp, seed);
  const Inputs& in = c.in;
  const int Tp = c.Tp, K = s.K;

  std::mt19937 gen(seed);
  c.idx.assign(size_t(Tp) * K, -1);
  const int32_t junk[] = {-1, std::numeric_limits<int32_t>::min(), Tp, 1 << 30, Tp + 5};
  for (int g = 0; g < Tp; ++g) {
    const int kb = static_cast<int>(L.key_begin(g)), ke = static_cast<int>(L.key_end(g));
    std::vector<int> keys(ke - kb);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = kb + static_cast<int>(i);
    std::shuffle(keys.begin(), keys.end(), gen);
    int32_t* r = &c.idx[size_t(g) * K];
    int slot = (g % 5 == 2) ? std::min(40, K - 1) : 0;  // a leading block of invalid slots
    for (int i = 0; i < slot; ++i) r[i] = junk[i % 5];
    for (size_t i = 0; i < keys.size() && slot < K; ++i) {
      if (gen() % 4 == 0 && slot + 1 < K) r[slot++] = junk[gen() % 5];
      if (gen() % 6 == 0 && slot + 1 < K && g + 1 < Tp)  // a future key, often the very next row
        r[slot++] = gen() % 2 ? g + 1 : g + 1 + int(gen() % (Tp - g - 1));
      if (gen() % 8 == 0 && slot + 1 < K && kb > 0) r[slot++] = int(gen() % kb);  // an earlier segment's key
      r[slot++] = keys[i];
      // A key the row already holds, again (S(g) is a set: it counts once). One-key rows get
      // theirs twice half the time, so their exact-zero dQ~ also checks the de-duplication.
      if ((gen() % 7 == 0 || (keys.size() == 1 && g % 2 == 0)) && slot < K) r[slot++] = keys[gen() % (i + 1)];
    }
    if (g % 13 == 3)
      for (int i = 0; i < K; ++i) r[i] = junk[i % 5];  // nothing usable
  }
  c.usable.assign(Tp, 0);
  for (int g = 0; g < Tp; ++g) {
    std::vector<int32_t> keys;
    for (int i = 0; i < K; ++i)
      if (usable_key(L, g, c.idx[size_t(g) * K + i])) keys.push_back(c.idx[size_t(g) * K + i]);
    std::sort(keys.begin(), keys.end());
    c.usable[g] = static_cast<int>(std::unique(keys.begin(), keys.end()) - keys.begin());
  }

  // The reference's indices [Tp, K' = min(K, Tp)]: the kernels' rows as they are where they fit
  // (the reference drops the invalid slots itself), else each row's usable keys in slot order.
  const int64_t W = topk_width(K, Tp);
  TensorI ref({L.tp, W}, -1);
  for (int g = 0; g < Tp; ++g) {
    const int32_t* r = &c.idx[size_t(g) * K];
    if (W == K) {
      std::copy(r, r + K, ref.row(g));
    } else {
      int n = 0;
      for (int i = 0; i < K; ++i)
        if (usable_key(L, g, r[i])) ref.row(g)[n++] = r[i];
    }
  }
  RunOptions ex;
  ex.precision = Precision::exact;
  ex.indexer = false;  // decoupled from the top-k: only the attention and its backward
  ex.attention_indices = ref;
  RunOptions lp = ex;
  lp.precision = Precision::bf16;
  c.exact = run_core(p, in, ex);
  c.lowp = run_core(p, in, lp);

  // Q~ = [bf16(q_nope·W_UK) ; q_pe] and dO_lat = bf16(dO·W_UV): fp32 accumulation, as the bf16
  // policy's (and the host API's) GEMMs write them.
  c.Qt.resize(size_t(Tp) * d.H * c.D);
  c.dO_lat.resize(size_t(Tp) * d.H * d.C);
  std::vector<float> acc(d.C);
  for (int64_t g = 0; g < Tp; ++g)
    for (int64_t h = 0; h < d.H; ++h) {
      uint16_t* q = &c.Qt[size_t(g * d.H + h) * c.D];
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t n = 0; n < d.Dn; ++n) {
        const float a = float(in.q_nope.at(g, h, n));
        const double* w = &in.W_UK.at(h, n, 0);
        for (int64_t e = 0; e < d.C; ++e) acc[e] += a * float(w[e]);
      }
      for (int64_t e = 0; e < d.C; ++e) q[e] = bf16_bits(acc[e]);
      for (int64_t e = 0; e < d.R; ++e) q[d.C + e] = bf16_bits(float(in.q_pe.at(g, h, e)));
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t v = 0; v < d.Dv; ++v) {
        const float a = float(in.dO.at(g, h, v));
        const double* w = &in.W_UV.at(h, v, 0);
        for (int64_t e = 0; e < d.C; ++e) acc[e] += a * float(w[e]);
      }
      uint16_t* o = &c.dO_lat[size_t(g * d.H + h) * d.C];
      for (int64_t e = 0; e < d.C; ++e) o[e] = bf16_bits(acc[e]);
    }
  return c;
}

// What the kernels wrote: bf16 bits of O_lat and dQ~, fp32 lse and dK~, the loss target T^ per
// slot of sel (AttnBwdArgs::target) and sel, count themselves.
struct GpuRun {
  std::vector<uint16_t> O, dQ;
  std::vector<float> lse, dK, target;
  std::vector<int32_t> sel, cnt;
};

// Keys with their invisible rows NaN, NaN guards around every key buffer; every output poisoned
// (all-one bytes) except dK~, which is accumulated into.
GpuRun run_gpu(const Case& c, FwdKernel kernel = FwdKernel::best, BwdKernel bwd = BwdKernel::best) {
  const AttnShape& s = c.s;
  const int Tp = c.Tp, D = c.D;
  const auto poison = invisible_rows(c.L);
  auto keys = [&](const TensorD& t) {
    std::vector<uint16_t> v(t.data.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_bits(float(t.data[i]));
    for (int64_t r : poison)
      for (int64_t j = 0; j < t.row_size(); ++j) v[r * t.row_size() + j] = 0x7fc0;
    return v;
  };
  constexpr uint16_t kNaNBits = 0x7fc0;
  DeviceArray<uint16_t> Qt(c.Qt, kNaNBits), ck(keys(c.in.c), kNaNBits), kpe(keys(c.in.k_pe), kNaNBits),
      dO(c.dO_lat, kNaNBits);
  std::vector<int32_t> row(Tp), kb(Tp), ke(Tp);
  for (int g = 0; g < Tp; ++g)
    row[g] = g, kb[g] = int32_t(c.L.key_begin(g)), ke[g] = int32_t(c.L.key_end(g));
  DeviceArray<int32_t> idx(c.idx, -1), drow(row, 0), dkb(kb, 0), dke(ke, 0);
  DeviceArray<int32_t> sel(size_t(Tp) * s.K, -7), cnt(size_t(Tp), -7);
  DeviceArray<uint16_t> O(size_t(Tp) * s.H * s.C, kPoisonBf16), dQ(size_t(Tp) * s.H * D, kPoisonBf16);
  DeviceArray<float> lse(size_t(Tp) * s.H, poison_f32()), delta(size_t(Tp) * s.H, poison_f32()),
      dK(size_t(Tp) * D, 0.f), target(size_t(Tp) * s.K, 0.f);
  auto B = [](const DeviceArray<uint16_t>& a) { return reinterpret_cast<bf16*>(a.p); };
  const RowRanges rr{drow.p, dkb.p, dke.p};
  const float scale = static_cast<float>(c.p.softmax_scale);
  select_keys(SelectArgs{idx.p, rr, Tp, Tp, s.K, sel.p, cnt.p}, 0);
  attention_forward(AttnFwdArgs{B(Qt), B(ck), B(kpe), sel.p, cnt.p, Tp, Tp, s.H, s.C, s.R, s.K, scale, B(O), lse.p}, 0,
                    kernel);
  attention_delta(B(dO), B(O), delta.p, (int64_t)Tp * s.H, s.C, 0);
  attention_backward(AttnBwdArgs{B(Qt), B(ck), B(kpe), sel.p, cnt.p, B(dO), lse.p, delta.p, Tp, Tp, s.H, s.C, s.R, s.K,
                                 scale, B(dQ), dK.p, target.p},
                     0, bwd);
  check_cuda(cudaDeviceSynchronize(), "attention kernels");
  return GpuRun{O.download(), dQ.download(), lse.download(), dK.download(), target.download(), sel.download(),
                cnt.download()};
}

// The kernels' outputs as the catalogue tensors the host API makes of them (see the top).
struct Mapped {
  TensorD O_lat, lse, dq_nope, dq_pe, dc, dk_pe;
};

Mapped map_outputs(const Case& c, const GpuRun& r) {
  const Dims& d = c.p.dims;
  const int64_t Tp = c.Tp, D = c.D;
  Mapped m;
  m.O_lat = tensor_of_bf16({Tp, d.H, d.C}, r.O);
  m.lse = tensor_of({Tp, d.H}, r.lse);
  m.dq_pe = TensorD({Tp, d.H, d.R});
  m.dq_nope = TensorD({Tp, d.H, d.Dn});
  std::vector<float> dqn(d.C);
  for (int64_t g = 0; g < Tp; ++g)
    for (int64_t h = 0; h < d.H; ++h) {
      const uint16_t* q = &r.dQ[size_t(g * d.H + h) * D];
      for (int64_t e = 0; e < d.R; ++e)
        m.dq_pe.at(g, h, e) = is_poison_bits(q[d.C + e]) ? unwritten_value() : double(bf16_float(q[d.C + e]));
      const bool unwritten = std::any_of(q, q + d.C, [](uint16_t b) { return is_poison_bits(b); });
      for (int64_t e = 0; e < d.C; ++e) dqn[e] = bf16_float(q[e]);
      for (int64_t n = 0; n < d.Dn; ++n) {
        const double* w = &c.in.W_UK.at(h, n, 0);
        float a = 0.f;
        for (int64_t e = 0; e < d.C; ++e) a += dqn[e] * float(w[e]);
        m.dq_nope.at(g, h, n) = unwritten ? unwritten_value() : double(round_bf16(a));
      }
    }
  std::vector<float> dc(size_t(Tp) * d.C), dkpe(size_t(Tp) * d.R);
  for (int64_t t = 0; t < Tp; ++t) {
    std::copy_n(&r.dK[size_t(t) * D], d.C, &dc[size_t(t) * d.C]);
    std::copy_n(&r.dK[size_t(t) * D + d.C], d.R, &dkpe[size_t(t) * d.R]);
  }
  m.dc = tensor_of({Tp, d.C}, bf16_rounded(dc));
  m.dk_pe = tensor_of({Tp, d.R}, bf16_rounded(dkpe));
  return m;
}

// compare_tensor (SPEC.md §9) of every mapped output against the reference's exact and lowp sides.
void expect_parity(const Case& c, const GpuRun& r, const std::string& what, bool backward = true) {
  const Mapped m = map_outputs(c, r);
  const Result &E = c.exact, &Lw = c.lowp;
  EXPECT_TRUE(passes(compare_tensor("O_lat", m.O_lat, Lw.O_lat, E.O_lat, c.L), what));
  EXPECT_TRUE(passes(compare_tensor("lse", m.lse, Lw.lse, E.lse, c.L), what));
  if (!backward) return;
  EXPECT_TRUE(passes(compare_tensor("dq_nope", m.dq_nope, Lw.dq_nope, E.dq_nope, c.L), what));
  EXPECT_TRUE(passes(compare_tensor("dq_pe", m.dq_pe, Lw.dq_pe, E.dq_pe, c.L), what));
  EXPECT_TRUE(passes(compare_tensor("dc", m.dc, Lw.dc, E.dc, c.L), what));
  EXPECT_TRUE(passes(compare_tensor("dk_pe", m.dk_pe, Lw.dk_pe, E.dk_pe, c.L), what));
}

// The loss target T^[g, j] = Σ_h exp(s·Q~[g,h]·K~[sel[g,j]] − lse[g,h]) of the backward, against
// the same sum in fp64 over the kernels' own bf16 operands and lse: within fp32 rounding per slot
// (a dropped head group, a shifted slot or P taken after its bf16 rounding is far outside), each
// row's slots sum to its heads with keys (Σ_j P = 1 per head), and slots past count[g] stay 0.
void expect_target(const Case& c, const GpuRun& r) {
  const AttnShape& s = c.s;
  const double scale = c.p.softmax_scale;
  auto key = [&](int64_t t, int64_t e) {
    return double(round_bf16(float(e < s.C ? c.in.c.at(t, e) : c.in.k_pe.at(t, e - s.C))));
  };
  double worst = 0;
  for (int g = 0; g < c.Tp; ++g) {
    const int n = r.cnt[g];
    double row_sum = 0;
    for (int j = 0; j < s.K; ++j) {
      const float got = r.target[size_t(g) * s.K + j];
      if (j >= n) {
        ASSERT_EQ(got, 0.f) << "row " << g << " slot " << j << " past count " << n;
        continue;
      }
      const int64_t t = r.sel[size_t(g) * s.K + j];
      double want = 0;
      for (int h = 0; h < s.H; ++h) {
        const uint16_t* q = &c.Qt[size_t(g * s.H + h) * c.D];
        double dot = 0;
        for (int e = 0; e < c.D; ++e) dot += double(bf16_float(q[e])) * key(t, e);
        want += std::exp(scale * dot - double(r.lse[size_t(g) * s.H + h]));
      }
      const double err = std::fabs(double(got) - want) / std::max(want, 1e-30);
      worst = std::max(worst, std::fabs(double(got) - want));
      ASSERT_LE(std::fabs(double(got) - want), 1e-4 * want + 1e-7)
          << "row " << g << " slot " << j << " key " << t << ": T^ " << got << ", fp64 " << want << " (rel " << err << ")";
      row_sum += got;
    }
    if (n > 0) {
      EXPECT_NEAR(row_sum, double(s.H), 1e-4 * s.H) << "row " << g << ": Σ_j T^ must be H";
    }
  }
  ::testing::Test::RecordProperty("target_max_abs_error", std::to_string(worst));
}

// Exact-value rules that hold bit for bit: a row without a usable key has O_lat exactly 0 and
// lse exactly −inf; a row with one usable key has a softmax over one element, whose gradient is
// exactly 0, so dQ~ is exactly 0 (not the noise of dP − Δ summed in two orders).
void expect_exact_rows(const Case& c, const GpuRun& r, bool backward = true) {
  const AttnShape& s = c.s;
  int empty = 0, single = 0;
  for (int g = 0; g < c.Tp; ++g) {
    if (c.usable[g] == 0) {
      ++empty;
      for (int e = 0; e < s.H * s.C; ++e) {
        const uint16_t b = r.O[size_t(g) * s.H * s.C + e];
        ASSERT_TRUE(b == 0x0000 || b == 0x8000) << "empty row " << g << ": O_lat bits " << b;
      }
      for (int h = 0; h < s.H; ++h) ASSERT_EQ(r.lse[size_t(g) * s.H + h], -INFINITY) << "empty row " << g;
    }
    if (backward && c.usable[g] == 1) {
      ++single;
      for (int e = 0; e < s.H * c.D; ++e) {
        const uint16_t b = r.dQ[size_t(g) * s.H * c.D + e];
        ASSERT_TRUE(b == 0x0000 || b == 0x8000) << "one-key row " << g << ": dQ~ bits " << b;
      }
    }
  }
  EXPECT_GT(empty, 0) << "the problem must hold rows without a usable key";
  if (backward) {
    EXPECT_GT(single, 0) << "the problem must hold rows with exactly one usable key";
  }
}

std::string shape_name(const AttnShape& s) {
  return "H" + std::to_string(s.H) + "_C" + std::to_string(s.C) + "_R" + std::to_string(s.R) + "_K" + std::to_string(s.K);
}

class AttentionKernels : public ::testing::TestWithParam<AttnShape> {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device: the attention kernels run only on a GPU";
  }
};

TEST_P(AttentionKernels, MatchDoublePrecisionOnSameOperands) {
  const Case c = make_case(GetParam(), 1234u + GetParam().H * 7 + GetParam().C);
  const GpuRun got = run_gpu(c);
  expect_parity(c, got, shape_name(c.s));
  expect_exact_rows(c, got);
  expect_target(c, got);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernels,
                         ::testing::Values(AttnShape{37, 3, 40, 8, 5}, AttnShape{29, 5, 17, 3, 9},
                                           AttnShape{50, 2, 16, 8, 64}, AttnShape{45, 70, 96, 16, 48},
                                           AttnShape{40, 4, 600, 16, 40}, AttnShape{90, 128, 512, 64, 80},
                                           AttnShape{33, 64, 512, 64, 2048}),
                         [](const auto& info) { return shape_name(info.param); });

// The Hopper wgmma forward (attention_fwd_sm90.cu) on the shapes it takes: every production-width
// shape must go to it on an sm_90 device, and it and the mma.sync kernel must each pass
// compare_tensor against the same exact and lowp reference (and the backward that consumed the
// wgmma forward's O_lat and lse must too). Head counts that are not a multiple of 64, R < 64 (zero
// padding of the query width), rows of exactly one and of just over one 64-key tile, K = 2048.
// The wgmma kernels' shapes: skipped without an sm_90 device.
class Sm90Shapes : public ::testing::TestWithParam<AttnShape> {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device: the attention kernels run only on a GPU";
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    if (major != 9 || minor != 0)
      GTEST_SKIP() << "the wgmma kernels need an sm_90 device (this one is sm_" << major << minor << ")";
  }
};
// C = 512 throughout: H, R and K name them.
std::string sm90_shape_name(const ::testing::TestParamInfo<AttnShape>& info) {
  const AttnShape& s = info.param;
  return "H" + std::to_string(s.H) + "_R" + std::to_string(s.R) + "_K" + std::to_string(s.K);
}
class WgmmaForward : public Sm90Shapes {};

TEST_P(WgmmaForward, MatchesDoublePrecisionAndTheMmaKernel) {
  const AttnShape& s = GetParam();
  const Case c = make_case(s, 777u + s.H * 3 + s.K);
  const AttnFwdArgs probe{nullptr, nullptr, nullptr, nullptr, nullptr, c.Tp, c.Tp, s.H, s.C, s.R, s.K,
                          static_cast<float>(c.p.softmax_scale), nullptr, nullptr};
  ASSERT_EQ(attention_forward_kernel_for(probe), FwdKernel::wgmma)
      << "an sm_90 device with C = 512 must take the wgmma kernel (is the sm_90a code in the build?)";
  const GpuRun w = run_gpu(c, FwdKernel::wgmma), m = run_gpu(c, FwdKernel::mma);
  expect_parity(c, w, shape_name(s) + " wgmma");
  expect_parity(c, m, shape_name(s) + " mma", false);
  expect_exact_rows(c, w);
  expect_exact_rows(c, m, false);
}

INSTANTIATE_TEST_SUITE_P(Shapes, WgmmaForward,
                         ::testing::Values(AttnShape{90, 128, 512, 64, 80}, AttnShape{33, 64, 512, 64, 2048},
                                           AttnShape{70, 70, 512, 16, 130}, AttnShape{66, 8, 512, 64, 64},
                                           AttnShape{140, 64, 512, 64, 65}, AttnShape{75, 1, 512, 8, 200}),
                         sm90_shape_name);

// The Hopper wgmma backward (attention_bwd_sm90.cu) on the shapes it takes, each fed by the same
// forward: it and the mma.sync backward must each pass compare_tensor against the same exact and
// lowp reference, hold the exact-zero rules, and give the loss target T^. Head counts that are not
// a multiple of 64 (zero heads in the tile), R < 64 (dK~ columns past C + R never written), rows
// of one key, of one and just over one 32-key tile, K = 2048.
class WgmmaBackward : public Sm90Shapes {};

TEST_P(WgmmaBackward, MatchesDoublePrecisionAndTheMmaKernel) {
  const AttnShape& s = GetParam();
  const Case c = make_case(s, 4242u + s.H * 5 + s.K);
  const AttnBwdArgs probe{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, c.Tp, c.Tp, s.H,
                          s.C,     s.R,     s.K,     static_cast<float>(c.p.softmax_scale), nullptr, nullptr};
  ASSERT_EQ(attention_backward_kernel_for(probe), BwdKernel::wgmma)
      << "an sm_90 device with C = 512 must take the wgmma backward (is the sm_90a code in the build?)";
  const GpuRun w = run_gpu(c, FwdKernel::best, BwdKernel::wgmma), m = run_gpu(c, FwdKernel::best, BwdKernel::mma);
  expect_parity(c, w, shape_name(s) + " wgmma backward");
  expect_parity(c, m, shape_name(s) + " mma backward");
  expect_exact_rows(c, w);
  expect_target(c, w);
  EXPECT_EQ(w.O, m.O);  // the same forward fed both
  // dQ~ of the two kernels: the same products in another order, so within a few bf16 units.
  double worst = 0, mx = 0;
  for (size_t i = 0; i < w.dQ.size(); ++i) {
    mx = std::max(mx, std::fabs(double(bf16_float(m.dQ[i]))));
    worst = std::max(worst, std::fabs(double(bf16_float(w.dQ[i])) - double(bf16_float(m.dQ[i]))));
  }
  EXPECT_LE(worst, 0.05 * mx) << "dQ~ of the wgmma and mma.sync backward differ by " << worst << " (max " << mx << ")";
}

INSTANTIATE_TEST_SUITE_P(Shapes, WgmmaBackward,
                         ::testing::Values(AttnShape{90, 128, 512, 64, 80}, AttnShape{33, 64, 512, 64, 2048},
                                           AttnShape{70, 70, 512, 16, 130}, AttnShape{66, 8, 512, 64, 33},
                                           AttnShape{140, 64, 512, 64, 65}, AttnShape{75, 1, 512, 8, 200}),
                         sm90_shape_name);

// Forcing a wgmma kernel onto a shape or device it does not take is one clear error naming the rule
// and the shape, before anything is launched (so this runs without a GPU too); `best` then picks the
// mma.sync kernel.
TEST(AttentionDispatch, ForcingAWgmmaKernelWhereItDoesNotFitIsAClearError) {
  const AttnFwdArgs f{nullptr, nullptr, nullptr, nullptr, nullptr, 4, 4, 8, 40, 8, 4, 1.f, nullptr, nullptr};
  const AttnBwdArgs b{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 4, 4, 8,
                      40,      8,       4,       1.f,     nullptr, nullptr};
  EXPECT_EQ(attention_forward_kernel_for(f), FwdKernel::mma);
  EXPECT_EQ(attention_backward_kernel_for(b), BwdKernel::mma);
  auto expect_rule = [](auto&& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << ": forcing the wgmma kernel at C = 40 must throw";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("C = 512"), std::string::npos) << m;  // the rule
      EXPECT_NE(m.find("got C = 40"), std::string::npos) << m;  // the shape
    }
  };
  expect_rule([&] { attention_forward(f, 0, FwdKernel::wgmma); }, "forward");
  expect_rule([&] { attention_backward(b, 0, BwdKernel::wgmma); }, "backward");
}

// dK~ accumulates over queries with fp32 atomics: not bitwise deterministic. Both runs must pass
// the comparison, dQ~ and O_lat (no atomics) must be bitwise equal, and the dK~ spread between
// runs must stay within compare_tensor's floor kFloorRel·max|X| (check/compare.hpp: the room it
// grants for fp32 accumulation order; the README quotes the measured spread).
TEST(AttentionBackward, RunToRunSpreadIsFp32Rounding) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device: the attention kernels run only on a GPU";
  const Case c = make_case(AttnShape{120, 128, 512, 64, 128}, 99u);
  const GpuRun a = run_gpu(c), b = run_gpu(c);
  expect_parity(c, a, "run a");
  expect_parity(c, b, "run b");
  double mx = 0, diff = 0;
  for (size_t i = 0; i < a.dK.size(); ++i) {
    mx = std::max(mx, std::fabs(double(a.dK[i])));
    diff = std::max(diff, std::fabs(double(a.dK[i]) - double(b.dK[i])));
  }
  RecordProperty("dK_run_to_run_max_abs", std::to_string(diff));
  RecordProperty("dK_max_abs", std::to_string(mx));
  std::printf("dK~ run-to-run spread: max |a-b| = %.3g, max |dK| = %.3g, relative %.3g\n", diff, mx, diff / mx);
  EXPECT_LE(diff, kFloorRel * mx);
  EXPECT_EQ(a.dQ, b.dQ);  // dQ~ has no atomics: bitwise equal
  EXPECT_EQ(a.O, b.O);
  EXPECT_EQ(a.target, b.target);  // T^: 0 + a + b over the two head groups, the same in either order
}

}  // namespace
}  // namespace dsa::fused::testing
