// Host-side key sets of the GPU oracle: S(g) and the chunk plan. No device needed.
#include "check/gpu/key_sets.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>
#include <set>

namespace dsa::gpu {
namespace {

// S(g) the slow way: a std::set of the valid, visible slots.
std::vector<int32_t> naive_row(const StreamLayout& L, const TensorI& idx, int64_t g) {
  std::set<int32_t> s;
  for (int64_t j = 0; j < idx.row_size(); ++j) {
    const int64_t t = idx.row(g)[j];
    if (t >= 0 && t < L.tp && L.visible(g, t)) s.insert(static_cast<int32_t>(t));
  }
  return {s.begin(), s.end()};
}

void expect_matches_naive(const StreamLayout& L, const TensorI& idx) {
  const KeySets s = select_keys(L, idx);
  ASSERT_EQ(s.offset.size(), size_t(L.tp + 1));
  for (int64_t g = 0; g < L.tp; ++g) {
    const std::vector<int32_t> want = naive_row(L, idx, g);
    const std::vector<int32_t> got(s.keys.begin() + s.offset[g], s.keys.begin() + s.offset[g + 1]);
    ASSERT_EQ(got, want) << "row " << g;
    ASSERT_EQ(s.count[g], int32_t(want.size()));
  }
}

TensorI random_indices(const StreamLayout& L, int64_t width, uint64_t seed) {
  TensorI idx({L.tp, width});
  std::mt19937_64 rng(seed);
  const int32_t special[] = {-1, INT_MIN, static_cast<int32_t>(L.tp), INT_MAX};
  for (auto& x : idx.data)
    x = rng() % 4 == 0 ? special[rng() % 4] : static_cast<int32_t>(rng() % L.tp);  // future keys too
  return idx;
}

TEST(GpuOracleKeySets, DropsInvalidFutureDuplicateAndMaskedKeys) {
  const StreamLayout L = make_layout({5, 11}, {2, Layout::zigzag, 0}, PadRows::masked);
  TensorI idx({L.tp, 6}, -1);
  // Row 9 (segment 1, keys 8..9 visible): 8 twice, 9, a future 10, Tp, INT_MIN.
  const int32_t row9[] = {8, 9, 8, 10, static_cast<int32_t>(L.tp), INT_MIN};
  std::copy(std::begin(row9), std::end(row9), idx.row(9));
  // Row 6 is a pad row of segment 0 (L = 5): masked, it sees nothing.
  const int32_t row6[] = {0, 1, 2, 3, 4, 5};
  std::copy(std::begin(row6), std::end(row6), idx.row(6));
  const KeySets s = select_keys(L, idx);
  EXPECT_EQ(std::vector<int32_t>(s.keys.begin() + s.offset[9], s.keys.begin() + s.offset[10]),
            (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(s.count[6], 0);
  expect_matches_naive(L, idx);
}

TEST(GpuOracleKeySets, MatchesNaiveOnRandomRows) {
  for (PadRows pad : {PadRows::attend, PadRows::masked}) {
    const StreamLayout small = make_layout({7, 0, 12, 3}, {3, Layout::contiguous, 0}, pad);
    expect_matches_naive(small, random_indices(small, 9, 1));
    // Tp >= 1024 takes the threaded path; wide rows take the sort, narrow ones the scan.
    const StreamLayout big = make_layout({900, 500}, {2, Layout::zigzag, 0}, pad);
    expect_matches_naive(big, random_indices(big, 16, 2));
    expect_matches_naive(big, random_indices(big, 700, 3));
  }
}

TEST(GpuOracleKeySets, ChunksRespectBudgetAndDropEmptyRows) {
  const std::vector<int32_t> count = {0, 0, 3, 5, 1, 0, 0, 0, 8, 2, 2, 0};
  const auto chunks = plan_chunks(count, 10, 3);
  int64_t covered = 0, next = 0;
  for (const Chunk& c : chunks) {
    EXPECT_GE(c.r0, next);
    EXPECT_LE(c.rows(), 3);
    EXPECT_TRUE(c.rows() * c.kmax <= 10 || c.rows() == 1);
    EXPECT_GT(c.kmax, 0);
    EXPECT_EQ(c.kmax, *std::max_element(count.begin() + c.r0, count.begin() + c.r1));
    for (int64_t r = next; r < c.r0; ++r) EXPECT_EQ(count[r], 0) << "row " << r << " was dropped";
    covered += c.rows(), next = c.r1;
  }
  for (int64_t r = next; r < int64_t(count.size()); ++r) EXPECT_EQ(count[r], 0);
  EXPECT_GT(covered, 0);
  // A row wider than the budget still gets a chunk of its own.
  const auto wide = plan_chunks({40, 1}, 10, 8);
  ASSERT_FALSE(wide.empty());
  EXPECT_EQ(wide[0].r0, 0);
  EXPECT_EQ(wide[0].rows(), 1);
  EXPECT_EQ(wide[0].kmax, 40);
}

}  // namespace
}  // namespace dsa::gpu
