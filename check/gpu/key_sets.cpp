#include "check/gpu/key_sets.hpp"

#include <algorithm>
#include <thread>

namespace dsa::gpu {

namespace {

// S(g) of rows [g0, g1): counts into s.count, keys appended to `keys` (row order).
void select_rows(const StreamLayout& L, const TensorI& idx, int64_t g0, int64_t g1, KeySets& s,
                 std::vector<int32_t>& keys) {
  const int64_t Tp = L.tp, width = idx.shape.size() == 2 ? idx.shape[1] : 0;
  std::vector<int64_t> mark(Tp, -1);  // mark[t] == g: key t already taken by row g
  std::vector<int32_t> row;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t kb = L.key_begin(g), ke = L.key_end(g);  // visible keys, empty for masked pad rows
    const int32_t* in = idx.row(g);
    row.clear();
    for (int64_t j = 0; j < width; ++j) {
      const int64_t t = in[j];
      if (t < kb || t >= ke || mark[t] == g) continue;  // kb >= 0 and ke <= Tp: this also drops −1 and >= Tp
      mark[t] = g;
      row.push_back(static_cast<int32_t>(t));
    }
    // Ascending order, as the reference keeps S(g): scan the visible range when it is short
    // (linear), sort otherwise.
    if (ke - kb <= 4 * static_cast<int64_t>(row.size()) + 64) {
      row.clear();
      for (int64_t t = kb; t < ke; ++t)
        if (mark[t] == g) row.push_back(static_cast<int32_t>(t));
    } else {
      std::sort(row.begin(), row.end());
    }
    s.count[g] = static_cast<int32_t>(row.size());
    keys.insert(keys.end(), row.begin(), row.end());
  }
}

}  // namespace

KeySets select_keys(const StreamLayout& L, const TensorI& idx) {
  const int64_t Tp = L.tp;
  KeySets s;
  s.offset.assign(Tp + 1, 0);
  s.count.assign(Tp, 0);
  // Rows are independent: blocks of rows on a few threads (this is host work between device
  // stages at production sizes), joined in row order.
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 8);
  const int64_t blocks = Tp >= 1024 ? threads : 1, per = (Tp + blocks - 1) / blocks;
  std::vector<std::vector<int32_t>> keys(blocks);
  std::vector<std::thread> pool;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t g0 = std::min(Tp, b * per), g1 = std::min(Tp, g0 + per);
    if (blocks == 1) select_rows(L, idx, g0, g1, s, keys[b]);
    else pool.emplace_back([&, b, g0, g1] { select_rows(L, idx, g0, g1, s, keys[b]); });
  }
  for (auto& t : pool) t.join();
  for (int64_t g = 0; g < Tp; ++g) s.offset[g + 1] = s.offset[g] + s.count[g];
  s.keys.reserve(static_cast<size_t>(s.offset[Tp]));
  for (auto& k : keys) s.keys.insert(s.keys.end(), k.begin(), k.end());
  return s;
}

std::vector<Chunk> plan_chunks(const std::vector<int32_t>& count, int64_t slot_budget, int64_t row_cap) {
  std::vector<Chunk> out;
  const int64_t T = static_cast<int64_t>(count.size());
  int64_t r0 = 0;
  while (r0 < T) {
    int64_t r1 = r0, kmax = 0;
    while (r1 < T) {
      const int64_t k = std::max<int64_t>(kmax, count[r1]);
      const int64_t rows = r1 - r0 + 1;
      if (r1 > r0 && (rows > row_cap || rows * std::max<int64_t>(k, 1) > slot_budget)) break;
      kmax = k;
      ++r1;
    }
    if (kmax > 0) out.push_back({r0, r1, kmax});
    r0 = r1;
  }
  return out;
}

}  // namespace dsa::gpu
