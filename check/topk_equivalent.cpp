#include "check/topk_equivalent.hpp"

#include <algorithm>
#include <functional>
#include <unordered_set>

namespace dsa {

TopkVerdict topk_equivalent(const int32_t* row, int64_t width, const double* exact, int64_t count,
                            int64_t key_begin, double delta) {
  const int64_t want = std::min(width, count);
  std::unordered_set<int64_t> seen;
  for (int64_t i = 0; i < width; ++i) {
    const int64_t t = row[i];
    if (t < 0) continue;
    if (t < key_begin || t >= key_begin + count)
      return {false, "slot " + std::to_string(i) + " holds key " + std::to_string(t) + ", not visible"};
    if (!seen.insert(t).second)
      return {false, "key " + std::to_string(t) + " repeats (slot " + std::to_string(i) + ")"};
  }
  if (static_cast<int64_t>(seen.size()) != want)
    return {false, std::to_string(seen.size()) + " valid indices, expected " + std::to_string(want)};
  if (want == 0) return {};
  std::vector<double> sorted(exact, exact + count);
  std::nth_element(sorted.begin(), sorted.begin() + (want - 1), sorted.end(), std::greater<>());
  const double theta = sorted[want - 1];
  for (int64_t t : seen)
    if (!(exact[t - key_begin] >= theta - delta))
      return {false, "key " + std::to_string(t) + " scores " + std::to_string(exact[t - key_begin]) +
                         " < theta " + std::to_string(theta) + " - delta " + std::to_string(delta)};
  return {};
}

}  // namespace dsa
