// The fused indexer KL loss (SPEC.md §7) against the CPU reference through check/compare.hpp's
// compare_tensor: kl (α = 2) and dq_I, dk_I, dw (α = 3, rounded to bf16 as the host API writes them), sparse over the attention's indices with
// its lse, and dense over every visible key; odd and production-like shapes, injected invalid
// indices (−1, INT_MIN, Tp, non-causal, whole rows), masked pad rows with NaN-poisoned keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "fused/api.cuh"
#include "fused/indexer_testing.hpp"
#include "check/compare.hpp"
#include "core/bf16.hpp"
#include "reference/core.hpp"

namespace dsa::fused::testing {
namespace {

struct LossCase {
  std::vector<int64_t> seqlens;
  Dims d;
  int64_t K;
  LossMode mode = LossMode::sparse;
  bool relu = true;
  PadRows pad = PadRows::attend;
  bool inject = false;  // invalid and non-causal indices in the attention's rows
  uint64_t seed = 1;
  double zero_k_rows = 0;  // fraction of k_I rows set to 0: u = 0 exactly, where φ'(0) matters
  CpSpec cp{};  // cp > 1: each rank's local rows run separately; dk_I partials are summed
  bool target = false;  // sparse: T^ handed in (LossArgs::target, as the attention backward makes it)
  bool scores = false;  // with target: I per slot handed in too (LossArgs::scores, as the indexer makes it)
};

Dims dims(int64_t H, int64_t C, int64_t R, int64_t HI, int64_t DI) {
  Dims d;
  d.H = H, d.Dn = 16, d.R = R, d.C = C, d.Dv = 8, d.HI = HI, d.DI = DI;
  return d;
}

void check_loss(const LossCase& c) {
  const Dims& d = c.d;
  Problem p = small_problem(c.seqlens, d, c.K);
  p.relu = c.relu;
  p.pad_rows = c.pad;
  p.loss = c.mode;
  p.cp = c.cp;
  const StreamLayout L = layout_of(p);
  Inputs in = random_inputs(d, L.tp, c.seed);
  zero_k_I_rows(in, c.zero_k_rows);
  const int Tp = static_cast<int>(L.tp), K = static_cast<int>(topk_width(c.K, L.tp));

  // The attention's indices: the exact indexer's top-k, optionally with adversarial slots.
  RunOptions ex;
  TensorI idx = run_core(p, in, ex).topk;
  if (c.inject)
    for (int64_t g = 0; g < L.tp; ++g) {
      int32_t* row = idx.row(g);
      if (g % 7 == 3)
        for (int j = 0; j < K; ++j) row[j] = -1;  // a row whose every slot is invalid
      else if (K >= 4)
        row[(g % K)] = int32_t(g + 1), row[(g + 1) % K] = INT_MIN, row[(g + 2) % K] = Tp, row[(g + 3) % K] = -1;
    }
  ex.attention_indices = idx;
  RunOptions lp = ex;
  lp.precision = Precision::bf16;
  const Result E = run_core(p, in, ex), Lw = run_core(p, in, lp);

  // Q~ = [bf16(q_nope·W_UK) ; q_pe] as the bf16 policy's GEMM writes it.
  const int64_t CR = d.C + d.R;
  std::vector<bf16> Qt(size_t(L.tp) * d.H * CR);
  for (int64_t g = 0; g < L.tp; ++g)
    for (int64_t h = 0; h < d.H; ++h) {
      bf16* q = Qt.data() + (g * d.H + h) * CR;
      for (int64_t cc = 0; cc < d.C; ++cc) {
        float acc = 0.f;
        for (int64_t n = 0; n < d.Dn; ++n) acc += float(in.q_nope.at(g, h, n)) * float(in.W_UK.at(h, n, cc));
        q[cc] = __float2bfloat16(acc);
      }
      for (int64_t r = 0; r < d.R; ++r) q[d.C + r] = __float2bfloat16(float(in.q_pe.at(g, h, r)));
    }
  TensorD lse_t = Lw.lse;  // the attention's (fp32) lse
  TensorD Qt_t({L.tp, d.H, CR});
  for (size_t e = 0; e < Qt.size(); ++e) Qt_t.data[e] = static_cast<double>(__bfloat162float(Qt[e]));

  const auto poison = invisible_rows(L);
  DeviceArray<bf16> dc(to_bf16(in.c, poison), bf16_nan()), dkpe(to_bf16(in.k_pe, poison), bf16_nan());
  DeviceArray<bf16> k_I(to_bf16(in.k_I, poison), bf16_nan());
  std::vector<float> kl_all(L.tp, kNaN), dq_all(size_t(L.tp) * d.HI * d.DI, kNaN), dw_all(size_t(L.tp) * d.HI, kNaN);
  std::vector<float> dk_all(size_t(L.tp) * d.DI, 0.f);
  for (int64_t r = 0; r < L.cp; ++r) {  // each rank: its local rows; key gradients summed over ranks
    const std::vector<int64_t>& rows_g = L.rank_rows[r];
    const int Tq = static_cast<int>(rows_g.size());
    const TensorD lse_local = gather_rows(lse_t, rows_g);
    const std::vector<float> lse(lse_local.data.begin(), lse_local.data.end());
    std::vector<uint8_t> counted(Tq);
    for (int i = 0; i < Tq; ++i) counted[i] = L.active(rows_g[i]) ? 1 : 0;
    DeviceArray<bf16> dQt(to_bf16(gather_rows(Qt_t, rows_g)), bf16_nan());
    DeviceArray<bf16> q_I(to_bf16(gather_rows(in.q_I, rows_g)), bf16_nan()), w(to_bf16(gather_rows(in.w, rows_g)), bf16_nan());
    DeviceArray<float> dlse(lse, kNaN);
    DeviceArray<int32_t> didx(gather_rows(idx, rows_g).data, -1);
    DeviceArray<uint8_t> dcounted(counted, 0);
    DeviceArray<float> kl(Tq, kNaN), dq_I(size_t(Tq) * d.HI * d.DI, kNaN), dk_I(size_t(L.tp) * d.DI, kNaN),
        dw(size_t(Tq) * d.HI, kNaN);
    DeviceRows rows(L, rows_g);
    // T^[i, j] = Σ_h exp(s·Q~[g,h]·K~[t] − lse[g,h]) in fp64 over the bf16 operands, 0 off the support.
    std::vector<float> target;
    if (c.target) {
      target.assign(size_t(Tq) * K, 0.f);
      for (int i = 0; i < Tq; ++i)
        for (int j = 0; j < K; ++j) {
          const int64_t g = rows_g[i], t = idx.at(g, j);
          if (t < 0 || t >= Tp || !L.visible(g, t)) continue;
          double sum = 0;
          for (int64_t h = 0; h < d.H; ++h) {
            double dot = 0;
            for (int64_t e = 0; e < CR; ++e)
              dot += Qt_t.at(g, h, e) * double(round_bf16(float(e < d.C ? in.c.at(t, e) : in.k_pe.at(t, e - d.C))));
            sum += std::exp(p.softmax_scale * dot - lse_local.at(i, h));
          }
          target[size_t(i) * K + j] = float(sum);
        }
    }
    DeviceArray<float> dtarget(c.target ? target : std::vector<float>(1, kNaN), kNaN);
    // I[i, j] = Σ_h w·φ(q_I·k_I) in fp64 over the bf16 operands; NaN off the support (never read).
    std::vector<float> scores;
    if (c.scores) {
      scores.assign(size_t(Tq) * K, kNaN);
      for (int i = 0; i < Tq; ++i)
        for (int j = 0; j < K; ++j) {
          const int64_t g = rows_g[i], t = idx.at(g, j);
          if (t < 0 || t >= Tp || !L.visible(g, t)) continue;
          double I = 0;
          for (int64_t h = 0; h < d.HI; ++h) {
            double u = 0;
            for (int64_t e = 0; e < d.DI; ++e)
              u += double(round_bf16(float(in.q_I.at(g, h, e)))) * double(round_bf16(float(in.k_I.at(t, e))));
            I += double(round_bf16(float(in.w.at(g, h)))) * (c.relu ? std::max(u, 0.0) : u);
          }
          scores[size_t(i) * K + j] = float(I);
        }
    }
    DeviceArray<float> dscores(c.scores ? scores : std::vector<float>(1, kNaN), kNaN);
    LossArgs a{};
    a.Qt = dQt.p, a.c = dc.p, a.k_pe = dkpe.p, a.lse = dlse.p, a.indices = didx.p;
    a.q_I = q_I.p, a.w = w.p, a.k_I = k_I.p, a.rows = rows.view();
    a.Tq = Tq, a.Tp = Tp, a.H = int(d.H), a.C = int(d.C), a.R = int(d.R), a.HI = int(d.HI), a.DI = int(d.DI), a.K = K;
    a.softmax_scale = float(p.softmax_scale);
    a.relu = c.relu, a.dense = c.mode == LossMode::dense;
    a.coeff_over_N = float(p.coeff / std::max<double>(1.0, double(L.counted_rows())));  // global N
    a.counted = dcounted.p;
    a.kl = kl.p, a.dq_I = dq_I.p, a.dk_I = dk_I.p, a.dw = dw.p;
    if (c.target) a.target = dtarget.p, a.Qt = nullptr, a.c = nullptr, a.k_pe = nullptr, a.lse = nullptr;  // unread
    if (c.scores) a.scores = dscores.p;
    indexer_loss(a, nullptr);
    check_cuda(cudaDeviceSynchronize(), "indexer_loss");
    const auto kl_l = kl.download(), dq_l = dq_I.download(), dw_l = dw.download(), dk_l = dk_I.download();
    const size_t nq = size_t(d.HI) * d.DI, nw = size_t(d.HI);
    for (int i = 0; i < Tq; ++i) {
      kl_all[rows_g[i]] = kl_l[i];
      std::copy(dq_l.begin() + i * nq, dq_l.begin() + (i + 1) * nq, dq_all.begin() + rows_g[i] * nq);
      std::copy(dw_l.begin() + i * nw, dw_l.begin() + (i + 1) * nw, dw_all.begin() + rows_g[i] * nw);
    }
    for (size_t e = 0; e < dk_all.size(); ++e) dk_all[e] += dk_l[e];  // the reduce-scatter's sum
  }

  const std::string ctx = "seed " + std::to_string(c.seed);
  EXPECT_TRUE(parity("kl", kl_all, E.kl, Lw.kl, L, ctx));
  EXPECT_TRUE(parity("dq_I", bf16_rounded(dq_all), E.dq_I, Lw.dq_I, L, ctx));
  EXPECT_TRUE(parity("dk_I", bf16_rounded(dk_all), E.dk_I, Lw.dk_I, L, ctx));
  EXPECT_TRUE(parity("dw", bf16_rounded(dw_all), E.dw, Lw.dw, L, ctx));
}

TEST(FusedIndexerLoss, SparseOddShapes) {
  DSA_SKIP_WITHOUT_GPU();
  check_loss({{5, 11, 0, 1, 7}, dims(3, 40, 8, 3, 20), 5, LossMode::sparse, true, PadRows::attend, false, 1, 0.3});
  check_loss({{9, 23}, dims(5, 33, 7, 2, 9), 6, LossMode::sparse, false, PadRows::masked, true, 2});
  check_loss({{130, 70}, dims(17, 24, 8, 18, 130), 150, LossMode::sparse, true, PadRows::masked, true, 3});
}

TEST(FusedIndexerLoss, DenseOddShapes) {
  DSA_SKIP_WITHOUT_GPU();
  check_loss({{5, 11, 0, 1, 7}, dims(3, 40, 8, 3, 20), 5, LossMode::dense, true, PadRows::masked, false, 4});
  check_loss({{200, 90}, dims(6, 16, 16, 4, 32), 8, LossMode::dense, false, PadRows::attend, false, 5});
  check_loss({{60, 33}, dims(4, 24, 8, 5, 16), 8, LossMode::dense, true, PadRows::masked, false, 9, 0.3});
}

TEST(FusedIndexerLoss, RanksOfContextParallelLayouts) {
  DSA_SKIP_WITHOUT_GPU();
  LossCase a{{37, 20, 3}, dims(3, 40, 8, 3, 20), 6, LossMode::sparse, true, PadRows::masked, true, 61, 0.2};
  a.cp = CpSpec{2, Layout::zigzag, 0};
  check_loss(a);
  LossCase b{{90, 41}, dims(8, 64, 16, 8, 32), 24, LossMode::sparse, true, PadRows::attend, false, 62};
  b.cp = CpSpec{4, Layout::zigzag, 8};
  check_loss(b);
  LossCase c{{29, 50}, dims(4, 24, 8, 5, 16), 8, LossMode::dense, false, PadRows::masked, false, 63};
  c.cp = CpSpec{3, Layout::contiguous, 0};
  check_loss(c);
}

// T^ handed in, as fused/run.cpp does with the attention backward's: the kernel without Q~ and
// logits (the inputs it no longer reads are null) must pass on the same cases, CP ranks included.
TEST(FusedIndexerLoss, SparseWithTheAttentionsTarget) {
  DSA_SKIP_WITHOUT_GPU();
  auto given = [](LossCase c) {
    c.target = true;
    return c;
  };
  check_loss(given({{5, 11, 0, 1, 7}, dims(3, 40, 8, 3, 20), 5, LossMode::sparse, true, PadRows::attend, false, 11, 0.3}));
  check_loss(given({{130, 70}, dims(17, 24, 8, 18, 130), 150, LossMode::sparse, true, PadRows::masked, true, 13}));
  LossCase cp{{90, 41}, dims(8, 64, 16, 8, 32), 24, LossMode::sparse, true, PadRows::attend, true, 14};
  cp.cp = CpSpec{4, Layout::zigzag, 8};
  check_loss(given(cp));
  check_loss(given({{180, 140}, dims(128, 512, 64, 64, 128), 64, LossMode::sparse, true, PadRows::masked, true, 16}));
  // Several key tiles (pass B's two-tile pipeline, odd and even counts, a partial last tile), with
  // the running dq_I in shared memory at HI ≤ 64 and above, and in global memory where it does not
  // fit beside a second CTA (HI 128, DI 256).
  check_loss(given({{400}, dims(8, 32, 8, 64, 128), 333, LossMode::sparse, true, PadRows::attend, true, 17, 0.2}));
  check_loss(given({{300, 260}, dims(16, 64, 16, 96, 64), 300, LossMode::sparse, false, PadRows::masked, true, 18}));
  check_loss(given({{150, 120}, dims(8, 32, 8, 128, 256), 200, LossMode::sparse, true, PadRows::attend, true, 19}));
  // GLM-5's indexer width: a second k_I tile of its own (LossLayout::kI2), both passes pipelined.
  check_loss(given({{400}, dims(16, 64, 16, 32, 128), 300, LossMode::sparse, true, PadRows::attend, true, 20, 0.2}));
}

// T^ and the indexer's I per slot handed in, as fused/run.cpp does when the attention runs on the
// indexer's own top-k: no pass over the keys before the gradient pass (the scores of slots off
// the support are NaN: never read). With and without the second k_I tile, CP ranks included.
TEST(FusedIndexerLoss, SparseWithTheIndexersScores) {
  DSA_SKIP_WITHOUT_GPU();
  auto given = [](LossCase c) {
    c.target = c.scores = true;
    return c;
  };
  check_loss(given({{5, 11, 0, 1, 7}, dims(3, 40, 8, 3, 20), 5, LossMode::sparse, true, PadRows::attend, false, 21, 0.3}));
  check_loss(given({{400}, dims(16, 64, 16, 32, 128), 300, LossMode::sparse, true, PadRows::attend, true, 22, 0.2}));
  check_loss(given({{300, 260}, dims(16, 64, 16, 96, 64), 300, LossMode::sparse, false, PadRows::masked, true, 23}));
  check_loss(given({{180, 140}, dims(128, 512, 64, 64, 128), 64, LossMode::sparse, true, PadRows::masked, true, 24}));
  LossCase cp{{90, 41}, dims(8, 64, 16, 8, 32), 24, LossMode::sparse, true, PadRows::attend, true, 25};
  cp.cp = CpSpec{4, Layout::zigzag, 8};
  check_loss(given(cp));
}

TEST(FusedIndexerLoss, ProductionLike) {
  DSA_SKIP_WITHOUT_GPU();
  check_loss({{180, 140}, dims(128, 512, 64, 64, 128), 64, LossMode::sparse, true, PadRows::masked, true, 6});
  check_loss({{300}, dims(64, 512, 64, 32, 128), 200, LossMode::sparse, true, PadRows::attend, false, 7});
  check_loss({{150, 40}, dims(128, 512, 64, 64, 128), 64, LossMode::dense, true, PadRows::attend, false, 8});
}

}  // namespace
}  // namespace dsa::fused::testing
