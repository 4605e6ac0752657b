// Top-k (SPEC.md §4): the canonical order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "reference/topk.hpp"

namespace dsa {
namespace {

using VI = std::vector<int32_t>;

VI canonical(const std::vector<double>& s, int64_t key_begin, int64_t width) {
  VI out(width, 12345);
  topk_canonical(s.data(), s.size(), key_begin, width, out.data());
  return out;
}

TEST(Topk, CanonicalOrderScoreDescendingTiesByLowerIndex) {
  EXPECT_EQ(canonical({0.5, 2, 2, -1, 2}, 10, 4), (VI{11, 12, 14, 10}));
  EXPECT_EQ(canonical({0.5, 2, 2, -1, 2}, 10, 2), (VI{11, 12}));
  // ReLU ties at zero: every u < 0 gives score 0 exactly; the lower keys win.
  EXPECT_EQ(canonical({0, 0, 0, 0, 0.25}, 0, 3), (VI{4, 0, 1}));
}

TEST(Topk, WidthBeyondVisibleCountLeavesMinusOneSlots) {
  EXPECT_EQ(canonical({1, 3, 2}, 7, 5), (VI{8, 9, 7, -1, -1}));
  EXPECT_EQ(canonical({}, 7, 3), (VI{-1, -1, -1}));
}

TEST(Topk, MatchesAFullStableSortOnRandomRowsWithManyTies) {
  std::mt19937_64 rng(3);
  for (int it = 0; it < 300; ++it) {
    const int64_t count = rng() % 40, width = 1 + rng() % 30, begin = rng() % 50;
    std::vector<double> s(count);
    for (auto& x : s) x = double(int64_t(rng() % 5) - 2) * 0.5;  // values in {-1,-0.5,0,0.5,1}: many ties
    std::vector<int64_t> order(count);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return s[a] > s[b]; });
    VI want(width, -1);
    for (int64_t i = 0; i < std::min(width, count); ++i) want[i] = int32_t(begin + order[i]);
    EXPECT_EQ(canonical(s, begin, width), want) << "count " << count << " width " << width;
  }
}


}  // namespace
}  // namespace dsa
