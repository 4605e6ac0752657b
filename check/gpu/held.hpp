// Oracle outputs kept on the device (GpuOracleOptions::held), and the comparison's pass over them
// (check/compare_partial.hpp): at production shapes the exact and bf16 outputs are gigabytes each,
// and copying them to the host cost more than computing them. Plain C++: no CUDA headers.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "check/compare_partial.hpp"
#include "core/tensor.hpp"

namespace dsa::gpu {

struct HeldTensor {
  Shape shape;
  int64_t size = 0;
  bool fp32 = false;             // the bf16 policy's arrays are fp32, the exact ones fp64
  std::shared_ptr<void> memory;  // device memory, back to the pool when the last holder goes
  const void* data() const { return memory.get(); }
};
using HeldOutputs = std::map<std::string, HeldTensor>;

// The pass of compare_tensor over n = exact.size elements: `fused` (device, fp64) against the held
// exact and (when given) bf16 values; pad_row (device, one byte per row of per_row elements, may be
// null) marks the masked pad rows that must be exactly 0. One partial per kCompareChunk elements.
std::vector<ComparePartial> compare_partials(const double* fused, const HeldTensor& exact, const HeldTensor* lowp,
                                             const uint8_t* pad_row, int64_t per_row);
// Elements that are not finite (−inf allowed where neg_inf_allowed).
int64_t count_nonfinite(const HeldTensor& t, bool neg_inf_allowed);
// One element, read back.
double value_at(const HeldTensor& t, int64_t i);
// The whole tensor, read back (tests, diagnostics).
TensorD to_host(const HeldTensor& t);

}  // namespace dsa::gpu
