#include "reference/topk.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

namespace dsa {

void topk_canonical(const double* scores, int64_t count, int64_t key_begin, int64_t width, int32_t* out,
                    Plant plant) {
  std::vector<int64_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  const int64_t m = std::min(width, count);
  auto better = [&](int64_t a, int64_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + std::min(m + 1, count), order.end(), better);
  if (plant == Plant::topk_lowest_on_ties && m > 0 && m < count && scores[order[m - 1]] == scores[order[m]]) {
    // The planted bug: a tie at the boundary lets the best key strictly below the tie in.
    const double tie = scores[order[m - 1]];
    int64_t below = -1;
    for (int64_t i = 0; i < count; ++i)
      if (scores[i] < tie && (below < 0 || better(i, below))) below = i;
    if (below >= 0) order[m - 1] = below;
  }
  for (int64_t i = 0; i < width; ++i) out[i] = i < m ? static_cast<int32_t>(key_begin + order[i]) : -1;
}

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
