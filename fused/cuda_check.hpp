// Error checks for CUDA and cuBLAS calls: a failure throws std::runtime_error naming the call
// (the harness buckets it as a crash), never exits the process.
#pragma once

#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

#define DSA_CUDA_CHECK(expr)                                                                    \
  do {                                                                                          \
    cudaError_t dsa_err_ = (expr);                                                              \
    if (dsa_err_ != cudaSuccess)                                                                \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(dsa_err_) + " (" + \
                               __FILE__ + ":" + std::to_string(__LINE__) + ")");                \
  } while (0)
