// Wall time of the harness's stages (generate / backend / oracle / compare: a report's timings).
#pragma once

#include <chrono>

namespace dsa {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace dsa
