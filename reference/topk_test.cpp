// Top-k (SPEC.md §4): the canonical order and the equivalence test for fused rows.
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

// Scores of keys 10..15.
const std::vector<double> kScores = {3, 2, 2, 1, 0, -1};
TopkVerdict eq(VI row, double delta = 0) {
  return topk_equivalent(row.data(), row.size(), kScores.data(), kScores.size(), 10, delta);
}

TEST(TopkEquivalence, AcceptsCanonicalPermutationsAndTieFlips) {
  for (VI row : {VI{10, 11, 12}, VI{12, 10, 11}, VI{11, 12, 10}}) {
    auto v = eq(row);
    EXPECT_TRUE(v.ok) << v.why;
    EXPECT_TRUE(v.why.empty());
  }
  // Width 2: key 11 and key 12 tie at the boundary, either is legal.
  EXPECT_TRUE(eq({10, 11}).ok);
  EXPECT_TRUE(eq({12, 10}).ok);
  // −1 slots anywhere when more slots than visible keys.
  VI wide = {-1, 15, 10, -1, 13, 11, 12, 14, -1};
  EXPECT_TRUE(eq(wide).ok) << eq(wide).why;
}

TEST(TopkEquivalence, RejectsRepeats) {
  auto v = eq({10, 10, 11});
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.why.find("repeat"), std::string::npos) << v.why;
  EXPECT_FALSE(eq({10, 11, 12, 12, -1, -1, 13, 14, 15}).ok);
}

TEST(TopkEquivalence, RejectsInvisibleIndices) {
  for (int32_t bad : {9, 16, 1000, std::numeric_limits<int32_t>::max()}) {
    auto v = eq({10, 11, bad});
    EXPECT_FALSE(v.ok) << bad;
    EXPECT_NE(v.why.find("visible"), std::string::npos) << v.why;
  }
}

TEST(TopkEquivalence, RejectsWrongCounts) {
  EXPECT_FALSE(eq({10, 11, -1}).ok);   // one missing
  EXPECT_FALSE(eq({-1, -1, -1}).ok);
  EXPECT_FALSE(eq({10, 11, 12, 13, 14, -1, -1}).ok);  // 6 visible, width 7: all 6 are required
  EXPECT_TRUE(eq({10, 11, 12, 13, 14, 15, -1}).ok);
  // No visible key at all: only −1 slots are right.
  const double none = 0;
  VI empty = {-1, -1};
  EXPECT_TRUE(topk_equivalent(empty.data(), 2, &none, 0, 4, 0).ok);
}

TEST(TopkEquivalence, RejectsLowScoresUnlessWithinDelta) {
  // θ = 2 (third best); key 13 scores 1.
  auto v = eq({10, 11, 13});
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.why.find("theta"), std::string::npos) << v.why;
  EXPECT_FALSE(eq({10, 11, 13}, 0.5).ok);
  EXPECT_TRUE(eq({10, 11, 13}, 1.0).ok);
  EXPECT_FALSE(eq({10, 11, 15}, 1.0).ok);
}

}  // namespace
}  // namespace dsa
