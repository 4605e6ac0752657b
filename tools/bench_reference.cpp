// Benchmarks of the exact CPU reference (README "The reference"): the DeepSeek-V3.2 shaped core
// (H 128, Dn 128, R 64, C 512, Dv 128, HI 64, DI 128, K 2048) on one sequence of S tokens, exact
// policy, OpenMP over query rows. GFLOP/s use the sparse FLOP formulas below, which count only
// valid selected (query, key) pairs P = Σ_g |S(g)| and visible pairs V = Σ_g #visible(g):
//
//   forward  (indexer, top-k, attention)  2·HI·(DI+1)·V + 2·S·H·C·(Dn+Dv) + 2·H·(2C+R)·P
//   backward (attention, SPEC.md §6)      4·S·H·C·(Dn+Dv) + 2·H·(3(C+R) + 2C)·P
//   indexer loss, forward + backward      2·P·(H·(C+R) + 3·HI·DI)
//
// Each reference benchmark also reports `vs_gemm`: its FLOP/s as a fraction of a plain Eigen fp64
// GEMM (the projection-sized product [S·H, C] x [C, Dn], compiled with the same flags as the
// reference, DSA_NATIVE) measured in the same run, so that figures from different machines and
// builds compare as "how far from this machine's GEMM rate". The GEMM is threaded two ways and the
// faster counts: Eigen's own OpenMP split (EigenGemmF64), and the rows of the product split over
// the OpenMP threads, one serial Eigen GEMM each (EigenGemmF64Rows, how the reference threads its
// products). Eigen's split hands packed panels between threads through busy-waits: on a 2-core VM
// it ran at a quarter of one thread's rate, which made vs_gemm flatter the reference 4x.
//
// Every figure is of a warm run (the workload's first, untimed run maps the memory the others
// reuse). run_core runs the stages in sequence; RunOptions.attention_backward = false and loss =
// off stop it after the forward. The backward and the loss are timed as differences: each iteration times
// a forward-only run and a run with the stage added (manual time = the difference).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <Eigen/Core>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <random>

#ifndef DSA_BENCH_NATIVE
#define DSA_BENCH_NATIVE 0  // 1 when built with DSA_NATIVE (-march=native)
#endif

#include "reference/core.hpp"
#include "core/layout.hpp"

namespace dsa::bench_reference {
namespace {

struct Workload {
  Problem p;
  Inputs in;
  double pairs = 0, visible = 0;
};

Dims deepseek_v32() {
  Dims d;
  d.H = 128, d.Dn = 128, d.R = 64, d.C = 512, d.Dv = 128, d.HI = 64, d.DI = 128;
  return d;
}

// One sequence of S tokens; inputs are normal values rounded to bf16, scaled so logits are O(1).
const Workload& workload(int64_t S) {
  static std::map<int64_t, std::unique_ptr<Workload>> cache;
  auto& w = cache[S];
  if (w) return *w;
  w = std::make_unique<Workload>();
  Problem& p = w->p;
  p.seqlens = {S};
  p.dims = deepseek_v32();
  p.topk = 2048;
  p.softmax_scale = 1.0 / std::sqrt(double(p.dims.Dn + p.dims.R));
  const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
  w->in = zero_inputs(p.dims, L.tp);
  std::mt19937_64 rng(2026);
  std::normal_distribution<double> normal;
  w->in.for_each([&](const std::string& n, TensorD& t) {
    const double sigma = n == "W_UK"  ? 1 / std::sqrt(double(p.dims.Dn))
                         : n == "W_UV" ? 1 / std::sqrt(double(p.dims.C))
                         : n == "q_I"  ? 1 / std::sqrt(double(p.dims.DI))
                                       : 1.0;
    for (double& x : t.data) x = static_cast<double>(static_cast<float>(Eigen::bfloat16(float(sigma * normal(rng)))));
  });
  const int64_t Kw = topk_width(p.topk, L.tp);
  for (int64_t g = 0; g < L.tp; ++g) {
    const int64_t vis = L.key_end(g) - L.key_begin(g);
    w->visible += vis;
    w->pairs += std::min(Kw, vis);  // the canonical top-k selects min(K', #visible) keys
  }
  // One untimed run of the whole core: the measured runs then find their large blocks already
  // mapped (reference/rank.hpp Held, core/tensor_memory.hpp), as an oracle does from a fuzz run's
  // second case on. Cold, page faults and zero-filling were a third of the forward on a 2-core VM.
  Problem whole = p;
  whole.loss = LossMode::sparse;
  RunOptions opt;
  opt.max_score_elements = 0;
  run_core(whole, w->in, opt);
  return *w;
}

double forward_flops(const Workload& w) {
  const Dims& d = w.p.dims;
  const double S = w.p.seqlens[0];
  return 2.0 * d.HI * (d.DI + 1) * w.visible + 2.0 * S * d.H * d.C * (d.Dn + d.Dv) +
         2.0 * d.H * (2 * d.C + d.R) * w.pairs;
}
double backward_flops(const Workload& w) {
  const Dims& d = w.p.dims;
  const double S = w.p.seqlens[0];
  return 4.0 * S * d.H * d.C * (d.Dn + d.Dv) + 2.0 * d.H * (3 * (d.C + d.R) + 2 * d.C) * w.pairs;
}
double loss_flops(const Workload& w) {
  const Dims& d = w.p.dims;
  return 2.0 * w.pairs * (d.H * (d.C + d.R) + 3.0 * d.HI * d.DI);
}

double seconds(const Problem& p, const Inputs& in, const RunOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  Result r = run_core(p, in, opt);
  benchmark::DoNotOptimize(r.O.data.data());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The projection-sized GEMM [S·H, C] x [C, Dn] (the absorbed projection q_nope·W_UK of every head
// stacked, transposed: 2·S·H·C·Dn FLOP).
struct Gemm {
  Eigen::MatrixXd a, b, c;
  explicit Gemm(int64_t S) {
    const Dims d = deepseek_v32();
    a = Eigen::MatrixXd::Random(Eigen::Index(S * d.H), Eigen::Index(d.C));
    b = Eigen::MatrixXd::Random(Eigen::Index(d.C), Eigen::Index(d.Dn));
    c.resize(a.rows(), b.cols());
  }
  double flops() const { return 2.0 * double(a.rows()) * double(a.cols()) * double(b.cols()); }
  // Eigen's own threading: one product, split by Eigen over the OpenMP threads.
  void eigen_threads() { c.noalias() = a * b; }
  // The rows split over the OpenMP threads, one serial Eigen GEMM each (Eigen does not split a
  // product made inside a parallel region).
  void omp_rows() {
#pragma omp parallel
    {
      const Eigen::Index nt = omp_get_num_threads(), id = omp_get_thread_num();
      const Eigen::Index r0 = a.rows() * id / nt, r1 = a.rows() * (id + 1) / nt;
      c.middleRows(r0, r1 - r0).noalias() = a.middleRows(r0, r1 - r0) * b;
    }
  }
  // Seconds of one call, after a warm-up call.
  template <class F>
  double time(F f) {
    f();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    benchmark::DoNotOptimize(c.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

// The fp64 GEMM rate of this machine and build: the faster of the two threadings, best of three
// calls each. Measured anew for every reference benchmark, right after its timed runs, so that
// the ratio compares two rates of the same minutes on a shared machine.
double gemm_rate(int64_t S) {
  static std::map<int64_t, std::unique_ptr<Gemm>> operands;  // made once per S; timed every call
  auto& slot = operands[S];
  if (!slot) slot = std::make_unique<Gemm>(S);
  Gemm& g = *slot;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    best = std::max(best, g.flops() / g.time([&] { g.eigen_threads(); }));
    best = std::max(best, g.flops() / g.time([&] { g.omp_rows(); }));
  }
  return best;
}

void set_counters(benchmark::State& state, const Workload& w, double flops) {
  state.counters["FLOP/s"] = benchmark::Counter(flops * state.iterations(), benchmark::Counter::kIsRate);
  // The same rate over the GEMM's (both per second): a fraction.
  const double gemm = gemm_rate(w.p.seqlens[0]);
  state.counters["vs_gemm"] = benchmark::Counter(flops * state.iterations() / gemm, benchmark::Counter::kIsRate);
  state.counters["gemm_GFLOP/s"] = gemm / 1e9;
  state.counters["GFLOP"] = flops / 1e9;
  state.counters["pairs"] = w.pairs;
  state.counters["threads"] = omp_get_max_threads();
  state.counters["native"] = DSA_BENCH_NATIVE;
}

// A stage's time as the difference of two runs; a difference lost in timer noise is an error,
// not an infinite rate.
void difference(benchmark::State& state, double with_stage, double without) {
  if (with_stage <= without) {
    state.SkipWithError("the stage's time is below the noise of the forward's (machine busy?)");
    state.SetIterationTime(1e-9);
    return;
  }
  state.SetIterationTime(with_stage - without);
}

RunOptions forward_only() {
  RunOptions o;
  o.attention_backward = false;
  o.max_score_elements = 0;  // no [Tp, Tp] score matrix
  return o;
}

// Indexer scores, top-k, Q~ projection, sparse attention, O projection.
void ReferenceForward(benchmark::State& state) {
  const Workload& w = workload(state.range(0));
  Problem p = w.p;
  p.loss = LossMode::off;
  const RunOptions opt = forward_only();
  for (auto _ : state) state.SetIterationTime(seconds(p, w.in, opt));
  set_counters(state, w, forward_flops(w));
}

// The attention backward of SPEC.md §6 (all six gradients).
void ReferenceBackward(benchmark::State& state) {
  const Workload& w = workload(state.range(0));
  Problem p = w.p;
  p.loss = LossMode::off;
  const RunOptions fwd = forward_only();
  RunOptions both = fwd;
  both.attention_backward = true;
  for (auto _ : state) difference(state, seconds(p, w.in, both), seconds(p, w.in, fwd));
  set_counters(state, w, backward_flops(w));
}

// The sparse indexer loss (streaming form) with its three gradients.
void ReferenceIndexerLoss(benchmark::State& state) {
  const Workload& w = workload(state.range(0));
  Problem off = w.p, sparse = w.p;
  off.loss = LossMode::off;
  sparse.loss = LossMode::sparse;
  const RunOptions fwd = forward_only();
  for (auto _ : state) difference(state, seconds(sparse, w.in, fwd), seconds(off, w.in, fwd));
  set_counters(state, w, loss_flops(w));
}

// The whole core as a backend runs it: forward, attention backward, sparse loss and its backward.
void ReferenceCore(benchmark::State& state) {
  const Workload& w = workload(state.range(0));
  Problem p = w.p;
  p.loss = LossMode::sparse;
  RunOptions opt;
  opt.max_score_elements = 0;
  for (auto _ : state) state.SetIterationTime(seconds(p, w.in, opt));
  set_counters(state, w, forward_flops(w) + backward_flops(w) + loss_flops(w));
}

// The GEMM itself, reported in the same units (FLOP/s) for reading beside the reference's: with
// Eigen's threading (EigenGemmF64) and with rows over the OpenMP threads (EigenGemmF64Rows).
template <bool Rows>
void gemm_benchmark(benchmark::State& state) {
  Gemm g(state.range(0));
  for (auto _ : state) state.SetIterationTime(g.time([&] { Rows ? g.omp_rows() : g.eigen_threads(); }));
  state.counters["FLOP/s"] = benchmark::Counter(g.flops() * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["GFLOP"] = g.flops() / 1e9;
  state.counters["threads"] = omp_get_max_threads();
  state.counters["native"] = DSA_BENCH_NATIVE;
}
void EigenGemmF64(benchmark::State& state) { gemm_benchmark<false>(state); }
void EigenGemmF64Rows(benchmark::State& state) { gemm_benchmark<true>(state); }
BENCHMARK(EigenGemmF64)->ArgName("S")->Arg(256)->Arg(1024)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(EigenGemmF64Rows)->ArgName("S")->Arg(256)->Arg(1024)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);

// S = 1024 is the shape; S = 256 is a quick look (--benchmark_filter=/256).
#define DSA_REFERENCE_BENCH(fn) \
  BENCHMARK(fn)->ArgName("S")->Arg(256)->Arg(1024)->UseManualTime()->Unit(benchmark::kSecond)->Iterations(1)
DSA_REFERENCE_BENCH(ReferenceForward);
DSA_REFERENCE_BENCH(ReferenceBackward);
DSA_REFERENCE_BENCH(ReferenceIndexerLoss);
DSA_REFERENCE_BENCH(ReferenceCore);

}  // namespace
}  // namespace dsa::bench_reference
