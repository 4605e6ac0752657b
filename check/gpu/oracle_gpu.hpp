// The GPU oracle behind the staged-oracle interface of check/oracle.hpp (`--oracle gpu`).
#pragma once

#include <cstdint>
#include <memory>

#include "check/gpu/gpu_oracle.hpp"
#include "check/oracle.hpp"

namespace dsa {

// Throws Unavailable when there is no CUDA device. Outputs of hold_min_elements elements and up
// stay on the device and are compared there (Oracle::compare_held); the tests lower it.
std::unique_ptr<Oracle> make_gpu_oracle(int64_t hold_min_elements = kHeldElements);

}  // namespace dsa
