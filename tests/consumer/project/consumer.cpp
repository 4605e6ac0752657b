// A downstream test: "my kernel" (here the reference under the bf16 policy, standing in for a real
// kernel) and a broken one, judged by dsa-parity's staged oracle and SPEC §9 comparison.
#include <cstdio>
#include <random>

#include "check/judge.hpp"
#include "core/bf16.hpp"
#include "reference/core.hpp"

int main() {
  dsa::Problem p;
  p.seqlens = {5, 11};
  p.topk = 4;
  const dsa::StreamLayout L = dsa::make_layout(p.seqlens, p.cp, p.pad_rows);
  dsa::Inputs in = dsa::zero_inputs(p.dims, L.tp);
  std::mt19937 gen(7);
  std::normal_distribution<double> nd(0.0, 0.5);
  in.for_each([&](const std::string&, dsa::TensorD& t) {
    for (double& x : t.data) x = dsa::round_bf16(nd(gen));
  });
  const dsa::PreparedCase c = dsa::prepare(p, in, std::nullopt, {std::begin(dsa::kStages), std::end(dsa::kStages)});

  dsa::RunOptions opt;
  opt.precision = dsa::Precision::bf16;
  dsa::Result mine = dsa::run_core(p, in, opt);
  dsa::Result broken = mine;
  broken.O.data[3] += 1.0;

  auto oracle = dsa::make_cpu_oracle();
  const dsa::CaseVerdict good = dsa::judge(c, mine, *oracle);
  const dsa::CaseVerdict bad = dsa::judge(c, broken, *oracle);
  std::printf("my_kernel: %s (%s)\nbroken_kernel: %s (%s)\n", dsa::name(good.verdict), good.message.c_str(),
              dsa::name(bad.verdict), bad.message.c_str());
  if (good.verdict == dsa::Verdict::pass && bad.verdict == dsa::Verdict::fail && bad.tensor == "O") {
    std::printf("consumer: my_kernel passed, broken_kernel failed\n");
    return 0;
  }
  return 1;
}
