// SPEC.md §4: the equivalence test of a backend's top-k rows.
#include <gtest/gtest.h>

#include <vector>

#include "check/topk_equivalent.hpp"

namespace dsa {
namespace {

using VI = std::vector<int32_t>;

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
