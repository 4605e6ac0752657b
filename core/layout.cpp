#include "core/layout.hpp"

#include <numeric>

#include "core/errors.hpp"

namespace dsa {

namespace {
int64_t roundup(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
}  // namespace

int64_t StreamLayout::counted_rows() const {
  int64_t n = 0;
  for (int64_t g = 0; g < tp; ++g) n += active(g) ? 1 : 0;
  return n;
}

std::pair<int64_t, int64_t> StreamLayout::owner(int64_t g) const {
  for (int64_t r = 0; r < cp; ++r)
    for (size_t i = 0; i < rank_rows[r].size(); ++i)
      if (rank_rows[r][i] == g) return {r, static_cast<int64_t>(i)};
  return {-1, -1};
}

std::vector<int64_t> StreamLayout::gathered_order() const {
  std::vector<int64_t> order;
  order.reserve(tp);
  for (auto& rows : rank_rows) order.insert(order.end(), rows.begin(), rows.end());
  return order;
}

StreamLayout make_layout(const std::vector<int64_t>& seqlens, const CpSpec& cp, PadRows pad_rows) {
  require(!seqlens.empty(), "seqlens", "must list at least one sequence");
  for (size_t i = 0; i < seqlens.size(); ++i)
    require(seqlens[i] >= 0, "seqlens[" + std::to_string(i) + "]",
            "must be >= 0, got " + std::to_string(seqlens[i]));
  require(cp.size >= 1, "cp.size", "must be at least 1, got " + std::to_string(cp.size));
  require(cp.pad_multiple >= 0, "cp.pad_multiple", "must be >= 0 (0 = the layout's default)");
  const int64_t m = cp.effective_pad_multiple();
  if (cp.layout == Layout::zigzag)
    require(m % (2 * cp.size) == 0, "cp.pad_multiple",
            "must be a multiple of 2*cp = " + std::to_string(2 * cp.size) + " under zigzag, got " +
                std::to_string(m));

  StreamLayout L;
  L.cp = cp.size;
  L.kind = cp.layout;
  L.pad_rows = pad_rows;
  L.cu = {0};
  for (int64_t len : seqlens) {
    L.lengths.push_back(len);
    L.cu.push_back(L.cu.back() + (cp.layout == Layout::zigzag ? roundup(len, m) : len));
  }
  if (cp.layout == Layout::contiguous) {
    // The whole stream is padded at its end; the padding is one extra segment with no real row.
    const int64_t total = L.cu.back(), padded = roundup(total, cp.size * m);
    if (padded > total) {
      L.lengths.push_back(0);
      L.cu.push_back(padded);
    }
  }
  L.tp = L.cu.back();
  require(L.tp >= 1, "seqlens", "the packed stream must hold at least one row");

  L.seg.resize(L.tp);
  L.real.resize(L.tp);
  for (int64_t s = 0; s < L.segments(); ++s)
    for (int64_t g = L.cu[s]; g < L.cu[s + 1]; ++g) {
      L.seg[g] = static_cast<int32_t>(s);
      L.real[g] = (g - L.cu[s]) < L.lengths[s];
    }

  L.rank_rows.assign(cp.size, {});
  if (cp.layout == Layout::zigzag) {
    for (int64_t r = 0; r < cp.size; ++r)
      for (int64_t s = 0; s < L.segments(); ++s) {
        const int64_t h = (L.cu[s + 1] - L.cu[s]) / (2 * cp.size);
        for (int64_t chunk : {r, 2 * cp.size - 1 - r})
          for (int64_t i = 0; i < h; ++i) L.rank_rows[r].push_back(L.cu[s] + chunk * h + i);
      }
  } else {
    const int64_t per = L.tp / cp.size;
    for (int64_t r = 0; r < cp.size; ++r) {
      L.rank_rows[r].resize(per);
      std::iota(L.rank_rows[r].begin(), L.rank_rows[r].end(), r * per);
    }
  }
  return L;
}

}  // namespace dsa
