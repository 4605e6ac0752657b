#include "reference/topk.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dsa {

void topk_canonical(const double* scores, int64_t count, int64_t key_begin, int64_t width, int32_t* out,
                    Mutant mutant) {
  std::vector<int64_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  const int64_t m = std::min(width, count);
  auto better = [&](int64_t a, int64_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + std::min(m + 1, count), order.end(), better);
  if (mutant == Mutant::topk_lowest_on_ties && m > 0 && m < count && scores[order[m - 1]] == scores[order[m]]) {
    // The planted bug: a tie at the boundary lets the best key strictly below the tie in.
    const double tie = scores[order[m - 1]];
    int64_t below = -1;
    for (int64_t i = 0; i < count; ++i)
      if (scores[i] < tie && (below < 0 || better(i, below))) below = i;
    if (below >= 0) order[m - 1] = below;
  }
  for (int64_t i = 0; i < width; ++i) out[i] = i < m ? static_cast<int32_t>(key_begin + order[i]) : -1;
}

}  // namespace dsa
