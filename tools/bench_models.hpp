// The two production shapes the GPU benchmarks run (`/model:0`, `/model:1`), K = 2048.
#pragma once

#include "core/problem.hpp"

namespace dsa::bench {

struct Model {
  const char* name;
  Dims d;
};
inline const Model kModels[] = {{"DeepSeek-V3.2", {128, 128, 64, 512, 128, 64, 128}},
                                {"GLM-5", {64, 192, 64, 512, 256, 32, 128}}};
inline constexpr int kTopK = 2048;

}  // namespace dsa::bench
