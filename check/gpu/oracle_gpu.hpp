// The GPU oracle behind the staged-oracle interface of check/oracle.hpp (`--oracle gpu`).
#pragma once

#include <memory>

#include "check/oracle.hpp"

namespace dsa {

// Throws Unavailable when there is no CUDA device.
std::unique_ptr<Oracle> make_gpu_oracle();

}  // namespace dsa
