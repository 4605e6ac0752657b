// --oracle cpu|gpu|both|auto: which implementation computes the exact and lowp sides (check/oracle.hpp).
#pragma once

#include <memory>
#include <string>

#include "check/oracle.hpp"

namespace dsa {

// cpu: the CPU reference; gpu: the GPU oracle (Unavailable without a device or a CUDA build);
// both: a DualOracle (check/oracle_both.hpp), the CPU the authority and the GPU oracle beside it
// (Unavailable without a device); auto: gpu when a device is present, else cpu. InvalidInput("--oracle") for anything else.
std::unique_ptr<Oracle> make_oracle(const std::string& spec);

}  // namespace dsa
