// GPU benchmarks of the fused kernels (README "Benchmarks"): indexer + top-k, attention forward,
// attention backward, indexer loss forward + backward (on its own, and split as fused/run.cpp runs it:
// the backward emitting the loss target T^, the loss reading it), at DeepSeek-V3.2 and GLM-5 shapes with
// S = 4096, 16384, 65536 and 131072 (long context: query-side tensors past 2^31 elements), K = 2048;
// the attention backward again with hot keys (every row selecting the same keys in most slots: the
// dK~ atomics collide); CUDA events after warm-up; TFLOP/s over causal-valid pairs.
// The speed-up over the CPU reference: the reference is timed on a small stream (S = 256) and
// scaled per (query, selected key) pair. Compiled only with CUDA; skipped without a device.
#ifdef DSA_HAVE_CUDA

#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>

#include "fused/api.cuh"
#include "fused/attention.hpp"
#include "fused/device.hpp"
#include "fused/fill.hpp"
#include "fused/run.hpp"
#include "tools/bench_fused_names.hpp"
#include "tools/bench_models.hpp"
#include "harness/generate.hpp"
#include "reference/core.hpp"

namespace dsa::bench {
namespace {

using fused::bf16;

void check(cudaError_t e) {
  if (e != cudaSuccess) throw std::runtime_error(cudaGetErrorString(e));
}

template <class T>
struct Buf {
  T* p = nullptr;
  explicit Buf(size_t n) { check(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T))); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
};

// Row g's attention indices (K slots, the first min(K, g+1) valid, −1 after). Normal: the keys
// spread evenly over [0, g], slot j → ⌊j·(g+1)/n⌋. Hot keys: the first 3/4 of the valid slots are
// keys 0, 1, 2, … (the same keys in every row, so the dK~ atomics of all rows meet on them), the
// rest spread as in the normal rows (slot j ≥ hot → ⌊j·(g+1)/n⌋ ≥ hot: no repeat). Both give
// min(K, g+1) distinct visible keys per row: the same valid pairs and FLOP count.
void index_row(int32_t* row, int g, bool hot) {
  const int n = std::min(kTopK, g + 1), nhot = hot ? n * 3 / 4 : 0;
  if (n < kTopK) {  // g + 1 ≤ K: every key of [0, g], in order (hot or not)
    for (int j = 0; j < n; ++j) row[j] = j;
    for (int j = n; j < kTopK; ++j) row[j] = -1;
    return;
  }
  // n == kTopK, a power of two: the division is a shift (2.7·10^8 slots at S = 131072).
  static_assert((kTopK & (kTopK - 1)) == 0, "kTopK is a power of two");
  const uint64_t span = uint64_t(g) + 1;
  for (int j = 0; j < nhot; ++j) row[j] = j;
  for (int j = nhot; j < kTopK; ++j) row[j] = (int32_t)(uint64_t(j) * span / kTopK);
}

// One stream of S tokens (a single causal sequence, one rank) with every device tensor the four
// stages need. Attention indices: index_row (normal or hot keys). At S = 131072, DeepSeek-V3.2
// shape, the buffers hold ~83 GB (Q~, dQ~, O_lat, dO_lat: 17-19 GB each), so only one is alive.
struct Workload {
  int S, H, C, R, D, HI, DI, K;
  double pairs = 0;  // Σ_g min(K, g+1): the causal-valid (query, key) pairs of the sparse stages
  Buf<bf16> Qt, c, kpe, q_I, w, k_I, O_lat, dO_lat, dQt;
  Buf<float> lse, delta, dK, kl, dq_I, dk_I, dw;
  Buf<int32_t> row, kb, ke, idx, sel, cnt, topk;
  Buf<uint8_t> counted;
  cudaStream_t st = nullptr;

  Workload(const Dims& d, int S_, bool hot)
      : S(S_), H((int)d.H), C((int)d.C), R((int)d.R), D(C + R), HI((int)d.HI), DI((int)d.DI), K(kTopK),
        Qt((size_t)S * H * D), c((size_t)S * C), kpe((size_t)S * R), q_I((size_t)S * HI * DI), w((size_t)S * HI),
        k_I((size_t)S * DI), O_lat((size_t)S * H * C), dO_lat((size_t)S * H * C), dQt((size_t)S * H * D),
        lse((size_t)S * H), delta((size_t)S * H), dK((size_t)S * D), kl(S), dq_I((size_t)S * HI * DI),
        dk_I((size_t)S * DI), dw((size_t)S * HI), row(S), kb(S), ke(S), idx((size_t)S * K), sel((size_t)S * K),
        cnt(S), topk((size_t)S * K), counted(S) {
    check(cudaStreamCreate(&st));
    fused::fill_uniform_bf16(Qt.p, (int64_t)S * H * D, 1, 0.5f, st);
    fused::fill_uniform_bf16(c.p, (int64_t)S * C, 2, 1.f, st);
    fused::fill_uniform_bf16(kpe.p, (int64_t)S * R, 3, 1.f, st);
    fused::fill_uniform_bf16(q_I.p, (int64_t)S * HI * DI, 4, 1.f, st);
    fused::fill_uniform_bf16(w.p, (int64_t)S * HI, 5, 1.f, st);
    fused::fill_uniform_bf16(k_I.p, (int64_t)S * DI, 6, 1.f, st);
    fused::fill_uniform_bf16(dO_lat.p, (int64_t)S * H * C, 7, 1.f, st);
    std::vector<int32_t> h_row(S), h_kb(S, 0), h_ke(S);
    std::vector<uint8_t> h_counted(S, 1);
    // [S, K] int32 (1 GB at S = 131072): written once, never value-initialized first, by all the
    // host's threads (the first touch of its pages is most of the cost).
    std::unique_ptr<int32_t[]> h_idx(new int32_t[(size_t)S * K]);
    double sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (int g = 0; g < S; ++g) {
      h_row[g] = g;
      h_ke[g] = g + 1;
      sum += std::min(K, g + 1);
      index_row(h_idx.get() + (size_t)g * K, g, hot);
    }
    pairs = sum;
    check(cudaMemcpy(row.p, h_row.data(), (size_t)S * 4, cudaMemcpyHostToDevice));
    check(cudaMemcpy(kb.p, h_kb.data(), (size_t)S * 4, cudaMemcpyHostToDevice));
    check(cudaMemcpy(ke.p, h_ke.data(), (size_t)S * 4, cudaMemcpyHostToDevice));
    check(cudaMemcpy(idx.p, h_idx.get(), (size_t)S * K * 4, cudaMemcpyHostToDevice));
    check(cudaMemcpy(counted.p, h_counted.data(), S, cudaMemcpyHostToDevice));
    fused::select_keys(fused::SelectArgs{idx.p, ranges(), S, S, K, sel.p, cnt.p}, st);
    forward();
    fused::attention_delta(dO_lat.p, O_lat.p, delta.p, (int64_t)S * H, C, st);
    check(cudaStreamSynchronize(st));
  }
  ~Workload() { cudaStreamDestroy(st); }

  fused::RowRanges ranges() const { return {row.p, kb.p, ke.p}; }
  float scale() const { return 1.f / std::sqrt(192.f); }

  fused::IndexerArgs indexer_args() {
    return fused::IndexerArgs{q_I.p, w.p, k_I.p, ranges(), S, S, HI, DI, K, true, topk.p, nullptr};
  }
  void indexer(fused::IndexerKernel k = fused::IndexerKernel::best) { fused::indexer_topk(indexer_args(), st, k); }
  fused::AttnFwdArgs forward_args() {
    return fused::AttnFwdArgs{Qt.p, c.p, kpe.p, sel.p, cnt.p, S, S, H, C, R, K, scale(), O_lat.p, lse.p};
  }
  void forward(fused::FwdKernel k = fused::FwdKernel::best) { fused::attention_forward(forward_args(), st, k); }
  // with_target: the backward also emits the loss's target T^ (AttnBwdArgs::target, fused/run.cpp's order).
  void backward(bool with_target = false, fused::BwdKernel k = fused::BwdKernel::best) {
    check(cudaMemsetAsync(dK.p, 0, (size_t)S * D * 4, st));
    if (with_target) {
      check(cudaMemsetAsync(target().p, 0, (size_t)S * K * 4, st));
      target_filled_ = true;
    }
    fused::attention_backward(fused::AttnBwdArgs{Qt.p, c.p, kpe.p, sel.p, cnt.p, dO_lat.p, lse.p, delta.p, S, S, H, C,
                                                 R, K, scale(), dQt.p, dK.p, with_target ? target().p : nullptr},
                              st, k);
  }
  fused::BwdKernel backward_kernel() {
    return fused::attention_backward_kernel_for(fused::AttnBwdArgs{Qt.p, c.p, kpe.p, sel.p, cnt.p, dO_lat.p, lse.p,
                                                                   delta.p, S, S, H, C, R, K, scale(), dQt.p, dK.p});
  }
  // The loss on its own (T^ from its own logits), or as the pipeline runs it (given): reading the
  // T^ the backward left and the indexer's score of each selected key (fused/run.cpp's order; the
  // pattern's keys are not the indexer's own top-k, so indexer_scores_at stands in for it, once).
  void loss(bool given = false) {
    fused::LossArgs a{Qt.p, c.p, kpe.p, lse.p, sel.p, q_I.p, w.p, k_I.p, ranges(), S, S, H, C, R, HI,
                      DI, K, scale(), true, false, 1.f / S, counted.p, kl.p, dq_I.p, dk_I.p, dw.p};
    if (given) {
      if (!target_filled_) backward(true);  // T^ must hold the backward's values
      a.target = target().p;
      a.scores = sel_scores().p;
    }
    fused::indexer_loss(a, st);
  }
  // [S, K] fp32, made on first use (1 GiB at S = 131072).
  Buf<float>& target() {
    if (!target_) target_ = std::make_unique<Buf<float>>((size_t)S * K);
    return *target_;
  }
  std::unique_ptr<Buf<float>> target_;
  bool target_filled_ = false;  // a backward has written T^ (run_kernel allocates it up front)
  // [S, K] fp32: I of each slot of sel, made on first use.
  Buf<float>& sel_scores() {
    if (!sel_scores_) {
      sel_scores_ = std::make_unique<Buf<float>>((size_t)S * K);
      fused::indexer_scores_at(fused::SlotScoresArgs{q_I.p, w.p, k_I.p, sel.p, S, S, HI, DI, K, true, sel_scores_->p}, st);
    }
    return *sel_scores_;
  }
  std::unique_ptr<Buf<float>> sel_scores_;
};

// One workload alive at a time (the previous one is freed before the next is made).
Workload& workload(int model, int S, bool hot = false) {
  static std::unique_ptr<Workload> w;
  static std::tuple<int, int, bool> key{-1, -1, false};
  if (!w || key != std::make_tuple(model, S, hot)) {
    w.reset();
    w = std::make_unique<Workload>(kModels[model].d, S, hot);
    key = {model, S, hot};
  }
  return *w;
}

// FLOPs per causal-valid (query, key) pair, multiply-add = 2 (README "FLOP formulas").
double flops_per_pair(const std::string& kernel, const Dims& d) {
  const double D = double(d.C + d.R), C = double(d.C), H = double(d.H), I = double(d.HI * d.DI);
  if (kernel == "indexer") return 2 * I;                        // u = q_I·k_I for every head
  if (kernel == "forward" || kernel == "forward_mma") return 2 * H * (D + C);  // QKᵀ + PV
  if (kernel == "backward") return 2 * H * (D + C + D + D + C); // QKᵀ, dP, dQ~, dK~, dV~
  if (kernel == "loss_given_target") return 3 * 2 * I;          // u, dq_I, dk_I (T^, I came with the backward, indexer)
  return 2 * H * D + 3 * 2 * I;                                 // loss: logits; u, dq_I, dk_I
}

// CPU reference time per (query, key) pair for the whole core, measured once per model at S = 256.
double cpu_seconds_per_pair(int model) {
  static std::map<int, double> cache;
  auto it = cache.find(model);
  if (it != cache.end()) return it->second;
  Case c;
  c.seed = 7;
  c.problem.seqlens = {256};
  c.problem.dims = kModels[model].d;
  c.problem.topk = kTopK;
  c.problem.softmax_scale = 1.0 / std::sqrt(192.0);
  const Inputs in = generate_inputs(c);
  RunOptions opt;
  opt.precision = Precision::bf16;
  const auto t0 = std::chrono::steady_clock::now();
  run_core(c.problem, in, opt);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double pairs = 256.0 * 257.0 / 2.0;
  return cache[model] = s / pairs;
}

// Long streams (S ≥ 65536) take seconds a step: one warm-up and 2 timed iterations there; 2 and 5
// below (the figures of the README's table, whose benchmark names carry "iterations:5").
constexpr int kLongS = 65536;
int warmups_for(int S) { return S >= kLongS ? 1 : 2; }
int iterations_for(int S) { return S >= kLongS ? 2 : 5; }

void run_kernel(benchmark::State& state, const std::string& kernel) {
  if (fused::device_count() == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int model = (int)state.range(0), S = (int)state.range(1);
  const bool hot = kernel == "backward_hot";
  Workload& w = workload(model, S, hot);
  if (kernel == "backward_target" || kernel == "loss_given_target") {
    try {
      w.target();  // 1 GiB more at S = 131072: on a card that the shape filled already, say so and go on
      if (kernel == "loss_given_target") w.sel_scores();  // and 1 GiB more
    } catch (const std::exception& e) {
      (void)cudaGetLastError();  // the failed cudaMalloc must not surface at the next launch check
      state.SkipWithError((std::string("T^ or I buffer: ") + e.what()).c_str());
      return;
    }
  }
  auto step = [&] {
    if (kernel == "indexer") w.indexer();
    else if (kernel == "indexer_mma") w.indexer(fused::IndexerKernel::mma);
    else if (kernel == "indexer_two_phase") w.indexer(fused::IndexerKernel::two_phase);
    else if (kernel == "forward") w.forward();
    else if (kernel == "forward_mma") w.forward(fused::FwdKernel::mma);
    else if (kernel == "backward" || hot) w.backward();
    else if (kernel == "backward_target") w.backward(true);
    else if (kernel == "backward_mma") w.backward(false, fused::BwdKernel::mma);
    else w.loss(kernel == "loss_given_target");
  };
  // Indexer pairs: every visible key of every row (dense scores), S(S+1)/2.
  const bool indexer = kernel == "indexer" || kernel == "indexer_mma" || kernel == "indexer_two_phase";
  const double pairs = indexer ? double(S) * (S + 1) / 2 : w.pairs;
  try {
    step();  // the first warm-up: a forced kernel that does not fit this device says so here
  } catch (const std::invalid_argument& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (int i = 1; i < warmups_for(S); ++i) step();
  check(cudaStreamSynchronize(w.st));
  cudaEvent_t a, b;
  check(cudaEventCreate(&a));
  check(cudaEventCreate(&b));
  double total = 0;
  for (auto _ : state) {
    check(cudaEventRecord(a, w.st));
    step();
    check(cudaEventRecord(b, w.st));
    check(cudaEventSynchronize(b));
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b));
    state.SetIterationTime(ms / 1e3);
    total += ms / 1e3;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  const double per_iter = total / double(state.iterations());
  const std::string formula =
      hot || kernel == "backward_target" || kernel == "backward_mma" ? "backward" : indexer ? "indexer" : kernel;
  state.counters["TFLOP/s"] = flops_per_pair(formula, kModels[model].d) * pairs / per_iter / 1e12;
  state.counters["pairs"] = pairs;
  std::string label = std::string(kModels[model].name) + " S=" + std::to_string(S) + " K=" + std::to_string(kTopK);
  if (kernel == "indexer")
    switch (fused::indexer_topk_kernel_for(w.indexer_args())) {
      case fused::IndexerKernel::two_phase: label += " two-phase"; break;
      case fused::IndexerKernel::wgmma: label += " wgmma"; break;
      default: label += " mma.sync";
    }
  if (kernel == "forward")
    label += fused::attention_forward_kernel_for(w.forward_args()) == fused::FwdKernel::wgmma ? " wgmma" : " mma.sync";
  if (kernel == "backward" || hot || kernel == "backward_target")
    label += w.backward_kernel() == fused::BwdKernel::wgmma ? " wgmma" : " mma.sync";
  if (hot) label += " hot keys";
  state.SetLabel(label);
}

// The four stages in sequence against the CPU reference's whole core, scaled per pair.
void run_core_speedup(benchmark::State& state) {
  if (fused::device_count() == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int model = (int)state.range(0), S = (int)state.range(1);
  const double cpu = cpu_seconds_per_pair(model);
  Workload& w = workload(model, S);
  auto step = [&] {
    w.indexer();
    w.forward();
    w.backward(true);
    w.loss(true);
  };
  step();
  check(cudaStreamSynchronize(w.st));
  double total = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    check(cudaStreamSynchronize(w.st));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    total += s;
  }
  const double per_iter = total / double(state.iterations());
  state.counters["cpu_ref_us_per_pair"] = cpu * 1e6;
  state.counters["speedup_vs_cpu_ref"] = cpu * w.pairs / per_iter;
  state.SetLabel(std::string(kModels[model].name) + " S=" + std::to_string(S) + " (CPU timed at S=256, scaled per pair)");
}

// Registration, shape by shape (model, then S), every kernel of a shape in a row: the workload of
// a shape is made once (at S = 131072 that takes seconds), not once per kernel. The names
// (tools/bench_fused_names.hpp) are BM_Fused<Kernel>/model:M/S:S/iterations:N/manual_time, as
// BENCHMARK(...)->Args made them before.
benchmark::internal::Benchmark* shaped(benchmark::internal::Benchmark* b, int model, int S, int iterations) {
  return b->Args({model, S})->ArgNames({"model", "S"})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(iterations);
}

[[maybe_unused]] const bool registered = [] {
  using namespace fused_bench;
  for (int m = 0; m < 2; ++m)
    for (int S : kSeqLens) {
      for (const Kernel& k : kKernels) {
        const std::string kernel = k.kernel;
        shaped(benchmark::RegisterBenchmark(k.name, [kernel](benchmark::State& s) { run_kernel(s, kernel); }), m, S,
               iterations_for(S));
      }
      if (S == kCoreVsCpuSeqLen) shaped(benchmark::RegisterBenchmark(kCoreVsCpu, run_core_speedup), m, S, 3);
      for (int hs : kHotSeqLens)
        if (hs == S)
          shaped(benchmark::RegisterBenchmark(kHotKeys, [](benchmark::State& s) { run_kernel(s, "backward_hot"); }), m, S,
                 iterations_for(S));
    }
  return true;
}();

}  // namespace
}  // namespace dsa::bench

#endif  // DSA_HAVE_CUDA
