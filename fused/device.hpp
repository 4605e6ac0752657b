// Device discovery (plain C++: the harness and the tools include it without nvcc).
#pragma once

#include <string>

namespace dsa::fused {

// Number of CUDA devices; 0 when there is no driver or no device (never throws).
int device_count();
std::string device_name(int device);

}  // namespace dsa::fused
