// Packing, padding and CP sharding (SPEC.md §1–§2): the worked example exactly, and properties
// that must hold for any lengths, cp, layout and pad_multiple.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "core/errors.hpp"
#include "core/layout.hpp"

namespace dsa {
namespace {

using V = std::vector<int64_t>;

CpSpec spec(int64_t cp, Layout kind, int64_t pad_multiple = 0) {
  CpSpec s;
  s.size = cp, s.layout = kind, s.pad_multiple = pad_multiple;
  return s;
}

TEST(Layout, WorkedExampleZigzagCp2) {
  const StreamLayout L = make_layout({5, 11}, spec(2, Layout::zigzag));
  EXPECT_EQ(L.tp, 20);
  EXPECT_EQ(L.cu, (V{0, 8, 20}));
  EXPECT_EQ(L.lengths, (V{5, 11}));
  EXPECT_EQ(L.segments(), 2);
  EXPECT_EQ(L.rows_per_rank(), 10);
  EXPECT_EQ(L.rank_rows[0], (V{0, 1, 6, 7, 8, 9, 10, 17, 18, 19}));
  EXPECT_EQ(L.rank_rows[1], (V{2, 3, 4, 5, 11, 12, 13, 14, 15, 16}));
  V pads;
  for (int64_t g = 0; g < L.tp; ++g)
    if (!L.is_real(g)) pads.push_back(g);
  EXPECT_EQ(pads, (V{5, 6, 7, 19}));
  EXPECT_EQ(L.gathered_order(), (V{0, 1, 6, 7, 8, 9, 10, 17, 18, 19, 2, 3, 4, 5, 11, 12, 13, 14, 15, 16}));
  // Query 17 (B9: segment 1, position 9) sees keys 8 … 17.
  EXPECT_EQ(L.seg[17], 1);
  EXPECT_EQ(L.pos(17), 9);
  EXPECT_EQ(L.key_begin(17), 8);
  EXPECT_EQ(L.key_end(17), 18);
  EXPECT_TRUE(L.visible(17, 8) && L.visible(17, 17));
  EXPECT_FALSE(L.visible(17, 7) || L.visible(17, 18));
  EXPECT_EQ(L.owner(17), (std::pair<int64_t, int64_t>{0, 7}));
  EXPECT_EQ(L.owner(5), (std::pair<int64_t, int64_t>{1, 3}));
  EXPECT_EQ(L.counted_rows(), 20);  // pad_rows: attend counts pad rows
}

TEST(Layout, WorkedExampleContiguousCp2) {
  const StreamLayout L = make_layout({5, 11}, spec(2, Layout::contiguous));
  EXPECT_EQ(L.tp, 16);
  EXPECT_EQ(L.cu, (V{0, 5, 16}));  // no trailing pad segment: 16 is a multiple of cp·1
  EXPECT_EQ(L.rank_rows[0], (V{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(L.rank_rows[1], (V{8, 9, 10, 11, 12, 13, 14, 15}));
  for (int64_t g = 0; g < L.tp; ++g) EXPECT_TRUE(L.is_real(g));
  EXPECT_EQ(L.key_begin(7), 5);
  EXPECT_EQ(L.key_end(7), 8);
}

TEST(Layout, ContiguousTrailingPadSegmentIsNeverReal) {
  const StreamLayout L = make_layout({5, 6}, spec(4, Layout::contiguous, 2), PadRows::masked);
  EXPECT_EQ(L.tp, 16);  // 11 rounded up to cp·pad_multiple = 8
  EXPECT_EQ(L.cu, (V{0, 5, 11, 16}));
  EXPECT_EQ(L.lengths, (V{5, 6, 0}));
  for (int64_t g = 11; g < 16; ++g) {
    EXPECT_FALSE(L.is_real(g));
    EXPECT_EQ(L.seg[g], 2);
    EXPECT_EQ(L.key_begin(g), L.key_end(g));  // masked: sees nothing
  }
  EXPECT_EQ(L.counted_rows(), 11);
}

TEST(Layout, Cp1ZigzagPadsToEven) {
  const StreamLayout L = make_layout({5, 0, 1}, spec(1, Layout::zigzag));
  EXPECT_EQ(L.cu, (V{0, 6, 6, 8}));
  EXPECT_EQ(L.rank_rows.size(), 1u);
  EXPECT_EQ(L.rank_rows[0], (V{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(Layout, MaskedPadRowsSeeNothingAndAreNotCounted) {
  const StreamLayout L = make_layout({5, 11}, spec(2, Layout::zigzag), PadRows::masked);
  for (int64_t g : {5, 6, 7, 19}) {
    EXPECT_FALSE(L.active(g));
    EXPECT_EQ(L.key_end(g) - L.key_begin(g), 0);
  }
  EXPECT_TRUE(L.active(4));
  EXPECT_EQ(L.counted_rows(), 16);
}

int64_t roundup(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Every property of SPEC.md §1–§2 on one layout; returns the first broken one.
std::string check_layout(const StreamLayout& L, const V& lens, const CpSpec& cp) {
  const int64_t m = cp.effective_pad_multiple(), n = lens.size(), total = std::accumulate(lens.begin(), lens.end(), 0L);
  if (L.cp != cp.size || L.kind != cp.layout) return "cp/kind fields";
  if (L.cu.front() != 0 || L.cu.back() != L.tp) return "cu ends";
  if (static_cast<int64_t>(L.cu.size()) != L.segments() + 1) return "cu size";
  if (L.tp % cp.size) return "Tp not a multiple of cp";
  if (cp.layout == Layout::zigzag) {
    if (L.segments() != n) return "zigzag segment count";
    for (int64_t i = 0; i < n; ++i) {
      const int64_t P = L.cu[i + 1] - L.cu[i];
      if (P != roundup(lens[i], m) || P % (2 * cp.size)) return "zigzag padded length";
      if (L.lengths[i] != lens[i]) return "lengths";
    }
  } else {
    const int64_t padded = roundup(total, cp.size * m);
    if (L.tp != padded) return "contiguous Tp";
    if (L.segments() != n + (padded > total ? 1 : 0)) return "contiguous segment count";
    for (int64_t i = 0; i < n; ++i)
      if (L.cu[i + 1] - L.cu[i] != lens[i] || L.lengths[i] != lens[i]) return "contiguous segment length";
    if (L.segments() > n && L.lengths[n] != 0) return "trailing pad segment has real rows";
  }
  int64_t reals = 0;
  for (int64_t g = 0; g < L.tp; ++g) {
    const int64_t s = L.seg[g];
    if (g < L.cu[s] || g >= L.cu[s + 1]) return "seg of row " + std::to_string(g);
    if (L.is_real(g) != (L.pos(g) < L.lengths[s])) return "real of row " + std::to_string(g);
    reals += L.is_real(g);
    const bool act = L.is_real(g) || L.pad_rows == PadRows::attend;
    if (L.active(g) != act) return "active";
    if (L.key_begin(g) != L.cu[s] || L.key_end(g) != (act ? g + 1 : L.cu[s])) return "key range of " + std::to_string(g);
    // Real queries never see pad keys: padding sits at segment tails.
    if (L.is_real(g))
      for (int64_t t = L.key_begin(g); t < L.key_end(g); ++t)
        if (!L.is_real(t)) return "real row " + std::to_string(g) + " sees pad key " + std::to_string(t);
  }
  if (reals != total) return "real row count";
  if (L.counted_rows() != (L.pad_rows == PadRows::attend ? L.tp : total)) return "counted rows";

  // Ranks partition 0..Tp-1 with equal row counts.
  if (static_cast<int64_t>(L.rank_rows.size()) != cp.size) return "rank count";
  std::vector<int> hits(L.tp, 0);
  for (int64_t r = 0; r < cp.size; ++r) {
    if (static_cast<int64_t>(L.rank_rows[r].size()) != L.tp / cp.size) return "rows per rank";
    for (size_t i = 0; i < L.rank_rows[r].size(); ++i) {
      const int64_t g = L.rank_rows[r][i];
      if (g < 0 || g >= L.tp) return "row out of range";
      ++hits[g];
      if (L.owner(g) != std::pair<int64_t, int64_t>{r, int64_t(i)}) return "owner";
    }
  }
  for (int h : hits)
    if (h != 1) return "ranks do not partition the rows";
  V order;
  for (auto& rows : L.rank_rows) order.insert(order.end(), rows.begin(), rows.end());
  if (L.gathered_order() != order) return "gathered order";

  // The chunk structure of each layout.
  for (int64_t r = 0; r < cp.size; ++r) {
    V want;
    if (cp.layout == Layout::zigzag) {
      for (int64_t s = 0; s < L.segments(); ++s) {
        const int64_t h = (L.cu[s + 1] - L.cu[s]) / (2 * cp.size);
        for (int64_t i = 0; i < h; ++i) want.push_back(L.cu[s] + r * h + i);
        for (int64_t i = 0; i < h; ++i) want.push_back(L.cu[s] + (2 * cp.size - 1 - r) * h + i);
      }
    } else {
      for (int64_t g = r * L.tp / cp.size; g < (r + 1) * L.tp / cp.size; ++g) want.push_back(g);
    }
    if (L.rank_rows[r] != want) return "chunk structure of rank " + std::to_string(r);
  }
  return "";
}

TEST(Layout, PropertiesForRandomLengthsCpAndLayouts) {
  std::mt19937_64 rng(7);
  int checked = 0;
  for (int it = 0; it < 600; ++it) {
    const int64_t n = 1 + rng() % 5, cpn = 1 + rng() % 8;
    V lens(n);
    for (auto& l : lens) l = (rng() % 4 == 0) ? rng() % 2 : rng() % 40;  // many 0 and 1
    CpSpec cp = spec(cpn, rng() % 2 ? Layout::zigzag : Layout::contiguous);
    const int64_t choice = rng() % 3;
    if (choice == 1) cp.pad_multiple = cp.layout == Layout::zigzag ? 2 * cpn * (1 + rng() % 3) : 1 + rng() % 5;
    const PadRows pr = rng() % 2 ? PadRows::attend : PadRows::masked;
    const int64_t total = std::accumulate(lens.begin(), lens.end(), 0L);
    if (total == 0) {
      // An empty stream has no row at all: rejected naming seqlens.
      try {
        make_layout(lens, cp, pr);
        ADD_FAILURE() << "an all-empty stream was accepted";
      } catch (const InvalidInput& e) {
        EXPECT_EQ(e.field, "seqlens");
      }
      continue;
    }
    const StreamLayout L = make_layout(lens, cp, pr);
    EXPECT_EQ(L.pad_rows, pr);
    const std::string broken = check_layout(L, lens, cp);
    EXPECT_EQ(broken, "") << "cp " << cpn << " " << name(cp.layout) << " pad_multiple " << cp.pad_multiple
                          << " n " << n;
    ++checked;
  }
  EXPECT_GT(checked, 500);
}

TEST(Layout, TopkWidth) {
  EXPECT_EQ(topk_width(2048, 1024), 1024);
  EXPECT_EQ(topk_width(4, 20), 4);
  EXPECT_EQ(topk_width(20, 20), 20);
}

}  // namespace
}  // namespace dsa
