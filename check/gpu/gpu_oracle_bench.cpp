// Times the GPU oracle (exact and bf16 policy, every stage) at production shapes and prints JSON:
// DeepSeek-V3.2 (H 128, Dn 128, R 64, C 512, Dv 128, HI 64, DI 128, K 2048) and GLM-5 (H 64,
// Dn 192, Dv 256, HI 32), one sequence of S tokens. Each figure is the median of several runs
// after a warm-up, wall clock of gpu_oracle_run (uploads, device work and downloads included),
// with the per-part split of the median run. device_stages_seconds is the compute part (indexer and
// top-k, S(g), forward, loss, backward; each part ends with a device synchronize), without the
// host <-> device transfers of inputs and outputs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check/gpu/gpu_oracle.hpp"

namespace {

using namespace dsa;

// Round-to-nearest-even to bf16 (the inputs are bf16 values, SPEC.md §8).
double to_bf16(double x) {
  float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

Inputs make_inputs(const Dims& d, int64_t tp, uint64_t seed) {
  Inputs in;
  in.q_nope = TensorD({tp, d.H, d.Dn}), in.q_pe = TensorD({tp, d.H, d.R}), in.c = TensorD({tp, d.C});
  in.k_pe = TensorD({tp, d.R}), in.W_UK = TensorD({d.H, d.Dn, d.C}), in.W_UV = TensorD({d.H, d.Dv, d.C});
  in.q_I = TensorD({tp, d.HI, d.DI}), in.k_I = TensorD({tp, d.DI}), in.w = TensorD({tp, d.HI});
  in.dO = TensorD({tp, d.H, d.Dv});
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  in.for_each([&](const std::string& n, TensorD& t) {
    // Unit-scale logits and indexer products, as the tests' inputs.
    const double sigma = n == "W_UK" ? 1 / std::sqrt(double(d.Dn)) : n == "W_UV" ? 1 / std::sqrt(double(d.C))
                         : n == "q_I"  ? 1 / std::sqrt(double(d.DI)) : 1.0;
    for (double& x : t.data) x = to_bf16(sigma * normal(rng));
  });
  return in;
}

struct BenchShape {
  const char* name;
  Dims d;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t S = 4096, reps = 2;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--seq") S = std::stoll(argv[++i]);
    else if (std::string(argv[i]) == "--reps") reps = std::stoll(argv[++i]);
  }
  if (!gpu_oracle_available()) {
    std::printf("{\"error\": \"no CUDA device\"}\n");
    return 3;
  }
  Dims ds;
  ds.H = 128, ds.Dn = 128, ds.R = 64, ds.C = 512, ds.Dv = 128, ds.HI = 64, ds.DI = 128;
  Dims glm = ds;
  glm.H = 64, glm.Dn = 192, glm.Dv = 256, glm.HI = 32;
  const BenchShape shapes[] = {{"deepseek-v3.2", ds}, {"glm-5", glm}};
  std::printf("{\n  \"schema\": \"dsa-parity/gpu-oracle-bench/v2\",\n  \"seq\": %lld,\n  \"reps\": %lld,\n  \"runs\": [",
              (long long)S, (long long)reps);
  bool first = true;
  for (const BenchShape& sh : shapes) {
    Problem p;
    p.seqlens = {S};
    p.dims = sh.d;
    p.topk = 2048;
    p.softmax_scale = 1.0 / std::sqrt(double(sh.d.Dn + sh.d.R));
    p.loss = LossMode::sparse;
    const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
    const Inputs in = make_inputs(sh.d, L.tp, 7);
    double pair_total = 0;
    for (Precision prec : {Precision::exact, Precision::bf16}) {
      GpuOracleOptions o;
      o.precision = prec;
      std::vector<GpuOracleTimings> ts;
      for (int64_t r = 0; r <= reps; ++r) {  // run 0 is the warm-up
        GpuOracleTimings t;
        o.timings = &t;
        const Result res = gpu_oracle_run(p, L, in, o);
        if (r > 0) ts.push_back(t);
        if (r == reps && !std::isfinite(res.loss.data[0])) std::fprintf(stderr, "non-finite loss\n");
      }
      std::sort(ts.begin(), ts.end(), [](auto& a, auto& b) { return a.total < b.total; });
      const GpuOracleTimings& m = ts[ts.size() / 2];
      pair_total += m.total;
      std::printf("%s\n    {\"shape\": \"%s\", \"precision\": \"%s\", \"tp\": %lld, \"seconds_median\": %.4f, "
                  "\"seconds_min\": %.4f, \"seconds_max\": %.4f, \"device_stages_seconds\": %.4f, \"parts\": {\"upload\": %.4f, \"indexer_topk\": %.4f, "
                  "\"select\": %.4f, \"attention\": %.4f, \"loss\": %.4f, \"download\": %.4f}}",
                  first ? "" : ",", sh.name, name(prec), (long long)L.tp, m.total, ts.front().total, ts.back().total,
                  m.indexer + m.select + m.attention + m.loss,
                  m.upload, m.indexer, m.select, m.attention, m.loss, m.download);
      first = false;
    }
    std::printf(",\n    {\"shape\": \"%s\", \"precision\": \"exact+bf16\", \"seconds_median_sum\": %.4f}", sh.name,
                pair_total);
  }
  std::printf("\n  ]\n}\n");
  return 0;
}
