#include <algorithm>

#include "harness/case.hpp"

namespace dsa {

bool Case::checks(const std::string& stage) const {
  return std::find(stages.begin(), stages.end(), stage) != stages.end();
}

}  // namespace dsa
