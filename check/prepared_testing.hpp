// Tests only: a small prepared case (every stage) with N(0, 0.5) bf16-valued inputs, the shared
// starting point of the check/ tests.
#pragma once

#include <iterator>
#include <random>
#include <utility>
#include <vector>

#include "check/prepared.hpp"
#include "core/bf16.hpp"

namespace dsa::test {

inline PreparedCase small_case(std::vector<int64_t> seqlens, int64_t topk, uint64_t seed) {
  Problem p;
  p.seqlens = std::move(seqlens);
  p.topk = topk;
  const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
  Inputs in = zero_inputs(p.dims, L.tp);
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd(0.0, 0.5);
  in.for_each([&](const std::string&, TensorD& t) {
    for (double& x : t.data) x = round_bf16(nd(gen));
  });
  return prepare(p, in, std::nullopt, {std::begin(kStages), std::end(kStages)});
}

}  // namespace dsa::test
