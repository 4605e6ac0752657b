// Deterministic inputs (SPEC.md §8) with the adversarial features of SPEC.md §3 and §10, the
// injected attention indices, and the random case profiles.
#include "harness/generate.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "core/bf16.hpp"
#include "core/rank_shard.hpp"
#include "harness/bounds.hpp"
#include "harness/device_normals.hpp"
#include "harness/normal_bf16.hpp"
#include "harness/philox.hpp"
#include "core/errors.hpp"

namespace dsa {

namespace {

using philox::Stream;

// Standard deviation of each input before init.scale: weights ~ 1/sqrt(fan_in), so that
// Q~ and K~ entries are O(1) and s·Q~·K~ = O(1) with s = 1/sqrt(Dn+R); the indexer score
// Σ_h w·φ(q_I·k_I) is O(1) too. large_logits multiplies the queries and w by 16 (logits of tens
// to about a hundred).
double base_stddev(const std::string& n, const Case& c) {
  const Dims& d = c.problem.dims;
  const double act = c.init.scale, big = c.init.large_logits ? 16.0 : 1.0;
  if (n == "q_nope" || n == "q_pe") return act * big;
  if (n == "W_UK") return 1.0 / std::sqrt(double(d.Dn));
  if (n == "W_UV") return 1.0 / std::sqrt(double(d.C));
  if (n == "k_I") return act / std::sqrt(double(d.DI));
  if (n == "w") return big / std::sqrt(double(d.HI));
  return act;  // c, k_pe, q_I, dO
}

// Every feature below works on a set of rows: the row tensors of `in` hold the global rows g (local
// row i is global row g[i], ascending), the weights are whole. The whole case is g = 0 … Tp−1; a
// rank's shard is its rows (generate_rank_inputs), so one code path makes both, and every value
// is a function of its global row and element (the Philox counters), never of who generates it.
using Rows = std::vector<int64_t>;

bool per_row(const std::string& n) { return n != "W_UK" && n != "W_UV"; }

// Whole tensors of this many values and up draw their normals on a device when there is one
// (harness/device_normals.hpp): the same values, the host's CPU left to the cases beside.
constexpr int64_t kDeviceDrawMin = int64_t(1) << 20;

void fill(TensorD& t, const Stream& s, double stddev, bool uniform, const Rows* g) {
  const int64_t n = t.size(), w = t.row_size();
  if (!uniform && !g && n >= kDeviceDrawMin) {
    TensorData<uint16_t> bits(static_cast<size_t>(n));
    if (device_bf16_normal_bits(s, stddev, bits.data(), n)) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i)
        t.data[i] = bits[i] == kLibmDecides ? round_bf16(s.normal(i) * stddev) : double(bf16_float(bits[i]));
      return;
    }
  }
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = g ? (*g)[i / w] * w + i % w : i;  // the element's global index: its counter
    t.data[i] = uniform ? round_bf16((2.0 * s.uniform(at) - 1.0) * std::sqrt(3.0) * stddev)
                        : philox::bf16_normal(s, at, stddev);  // round_bf16(s.normal(at) · stddev), faster
  }
}

void set_row(TensorD& t, int64_t r, double v) { std::fill(t.row(r), t.row(r) + t.row_size(), v); }

// Whether score_ties makes k_I row t a copy of row t − 1 (which may itself be a copy).
bool k_I_row_copied(const Case& c, int64_t t) {
  return t >= 1 && Stream(c.seed, "score_ties/duplicate_k_I_row").uniform(t) < 0.3;
}

// Exact score ties: w > 0, k_I >= 0, and some query rows with q_I <= 0 in every head, whose
// ReLU scores are then exactly 0 on every key; plus k_I rows duplicated from the row before
// (equal scores for every query, with or without ReLU). A copied row's predecessor is in g
// (generate_rank_inputs adds it).
void apply_score_ties(Inputs& in, const Case& c, const Rows& g) {
  for (double& v : in.w.data) v = std::fabs(v);
  for (double& v : in.k_I.data) v = std::fabs(v);
  const Stream neg(c.seed, "score_ties/negative_q_I_row");
  const int64_t n = static_cast<int64_t>(g.size());
  for (int64_t i = 0; i < n; ++i)
    if (neg.uniform(g[i]) < 0.4)
      for (double* v = in.q_I.row(i); v != in.q_I.row(i) + in.q_I.row_size(); ++v) *v = -std::fabs(*v);
  for (int64_t i = 0; i < n; ++i)
    if (k_I_row_copied(c, g[i])) {
      if (i == 0 || g[i - 1] != g[i] - 1) throw std::logic_error("generate: a copied k_I row without its predecessor");
      std::copy(in.k_I.row(i - 1), in.k_I.row(i), in.k_I.row(i));
    }
}

// u = q_I·k_I == 0 exactly, where φ'(0) matters: zero heads of q_I and zero rows of k_I (at least
// one of each).
void apply_zero_rows(Inputs& in, const Case& c, const StreamLayout& L, const Rows& g) {
  const Stream sq(c.seed, "zero_rows/q_I"), sk(c.seed, "zero_rows/k_I");
  const int64_t tp = L.tp, hi = in.q_I.dim(1), di = in.q_I.dim(2), n = static_cast<int64_t>(g.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < hi; ++h)
      if (sq.uniform(g[i] * hi + h) < 0.15 || (g[i] == tp - 1 && h == 0)) std::fill_n(&in.q_I.at(i, h, 0), di, 0.0);
  for (int64_t i = 0; i < n; ++i)
    if (sk.uniform(g[i]) < 0.15 || g[i] == tp / 2) set_row(in.k_I, i, 0.0);
}

// Huge finite k_I values (|x| ~ 1e4) in rows no earlier query can see: each segment's last row
// and its pad rows. Scores stay finite (no inf, no NaN) but dwarf every other score.
void apply_huge_future_k_I(Inputs& in, const Case& c, const StreamLayout& L, const Rows& g) {
  const Stream s(c.seed, "huge_future_k_I");
  const int64_t di = in.k_I.dim(1);
  for (size_t i = 0; i < g.size(); ++i) {
    const int64_t t = g[i];
    if (L.is_real(t) && t != L.cu[L.seg[t] + 1] - 1) continue;
    for (int64_t d = 0; d < di; ++d)
      in.k_I.at(int64_t(i), d) =
          round_bf16(1e4 * (s.normal(t * di + d) >= 0 ? 1 : -1) * (1.0 + std::fabs(s.normal(t * di + d))));
  }
}

// Hot keys (SPEC.md §10): the first (up to) 3 real rows of each segment get k_I = M·e_0, every
// q_I[g, h, 0] is made >= 0.25 and every w >= 0. Their score M·Σ_h w_h·φ(q_I[g,h,0]) (M = 128)
// dwarfs the O(1) scores of other keys, so every row that sees them selects them: most rows of a
// sequence select the same few keys (contention in the dK/dV reduction). Applied before score_ties,
// which then makes its negative q_I rows (ties at 0 under ReLU) negative in dimension 0 too.
void apply_hot_keys(Inputs& in, const StreamLayout& L, const Rows& g) {
  constexpr double M = 128.0;
  const int64_t n = static_cast<int64_t>(g.size()), hi = in.q_I.dim(1);
  for (double& v : in.w.data) v = std::fabs(v);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < hi; ++h) {
      double& q0 = in.q_I.at(i, h, 0);
      q0 = round_bf16(std::fabs(q0) + 0.25);
    }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = g[i];
    if (L.is_real(t) && t < L.cu[L.seg[t]] + 3) {
      set_row(in.k_I, i, 0.0);
      in.k_I.at(i, 0) = M;
    }
  }
}

// NaN in the key-side rows of pad rows: legal only under pad_rows=masked, where no query sees them.
void apply_poison_pad_keys(Inputs& in, const StreamLayout& L, const Rows& g) {
  for (size_t i = 0; i < g.size(); ++i)
    if (!L.is_real(g[i])) {
      set_row(in.c, int64_t(i), NAN);
      set_row(in.k_pe, int64_t(i), NAN);
      set_row(in.k_I, int64_t(i), NAN);
    }
}

StreamLayout problem_layout(const Problem& p) { return make_layout(p.seqlens, p.cp, p.pad_rows); }

// The inputs over rows g (ascending; every copied k_I row's predecessor among them).
Inputs generate_rows(const Case& c, const StreamLayout& L, const Rows& g) {
  const Problem& p = c.problem;
  const bool all = static_cast<int64_t>(g.size()) == L.tp;  // g = 0 … Tp−1: the plain counters
  Inputs in;
  const bool uniform = c.init.distribution == "uniform";
  in.for_each([&](const std::string& n, TensorD& t) {  // every element filled: no zeros first
    t = TensorD(input_shape(n, p.dims, static_cast<int64_t>(g.size())), Uninitialized{});
    fill(t, Stream(c.seed, n), base_stddev(n, c), uniform, per_row(n) && !all ? &g : nullptr);
  });
  if (c.init.hot_keys) apply_hot_keys(in, L, g);
  if (c.init.score_ties) apply_score_ties(in, c, g);
  if (c.init.zero_rows) apply_zero_rows(in, c, L, g);
  if (c.init.huge_future_k_I) apply_huge_future_k_I(in, c, L, g);
  if (c.init.poison_pad_keys) {
    require(p.pad_rows == PadRows::masked, "init.poison_pad_keys", "requires pad_rows \"masked\"");
    apply_poison_pad_keys(in, L, g);
  }
  return in;
}

}  // namespace

Inputs generate_inputs(const Case& c) {
  const StreamLayout L = problem_layout(c.problem);
  Rows all(L.tp);
  std::iota(all.begin(), all.end(), 0);
  return generate_rows(c, L, all);
}

Inputs generate_rank_inputs(const Case& c, int64_t rank) {
  const StreamLayout L = problem_layout(c.problem);
  require(rank >= 0 && rank < L.cp, "rank", "must be in [0, cp), got " + std::to_string(rank));
  const Rows& mine = L.rank_rows[rank];
  // The rows to generate: the rank's, and under score_ties the k_I rows each copies from (a copy
  // of a copy reaches back further), ascending.
  std::vector<uint8_t> need(L.tp, 0);
  for (int64_t t : mine) {
    need[t] = 1;
    if (c.init.score_ties)
      for (int64_t s = t; k_I_row_copied(c, s) && !need[s - 1]; --s) need[s - 1] = 1;
  }
  Rows g;
  for (int64_t t = 0; t < L.tp; ++t)
    if (need[t]) g.push_back(t);
  const Inputs some = generate_rows(c, L, g);
  // Their local positions, then the rank's rows in its own order.
  std::vector<int64_t> at(L.tp, -1);
  for (size_t i = 0; i < g.size(); ++i) at[g[i]] = static_cast<int64_t>(i);
  Rows local;
  for (int64_t t : mine) local.push_back(at[t]);
  return shard_inputs(some, local);
}

std::optional<TensorI> injected_indices(const Case& c) {
  if (!c.init.inject_indices) return std::nullopt;
  const StreamLayout L = problem_layout(c.problem);
  const int64_t tp = L.tp, kw = topk_width(c.problem.topk, tp);
  const Stream s(c.seed, "inject_indices");
  const Stream dup(c.seed, "inject_indices/duplicates");  // its own stream: the other draws are unchanged
  TensorI out({tp, kw});
  // Rows on several threads (Tp·K' draws: 2·10^7 at Tp 9K, K 2048); each row draws from its own
  // counters, so the rows are the same whatever the thread count.
#pragma omp parallel for schedule(dynamic, 64) if (tp * kw > 65536)
  for (int64_t g = 0; g < tp; ++g) {
    std::vector<int64_t> valid_slots;
    std::vector<int32_t> vis;
    uint64_t ctr = uint64_t(g) * uint64_t(3 * kw + 8);  // disjoint counters per row
    auto draw = [&] { return s.uniform(ctr++); };
    auto below = [&](int64_t n) { return int64_t(s.below(ctr++, uint64_t(n))); };
    vis.clear();
    for (int64_t t = L.key_begin(g); t < L.key_end(g); ++t) vis.push_back(int32_t(t));
    const double kind = draw();
    const int64_t invalid_prefix = kind < 0.15 ? kw : kind < 0.3 ? (kw + 1) / 2 : 0;  // none valid / first half invalid
    size_t used = 0;
    valid_slots.clear();
    const int64_t seg_begin = L.key_begin(g);
    for (int64_t k = 0; k < kw; ++k) {
      int32_t& slot = out.at(g, k);
      if (k >= invalid_prefix && used < vis.size() && draw() < 0.6) {
        // A valid key not taken yet in this row (S(g) is a set): a lazy Fisher-Yates shuffle.
        std::swap(vis[used], vis[used + below(int64_t(vis.size() - used))]);
        slot = vis[used++];
        valid_slots.push_back(k);
        continue;
      }
      switch (below(8)) {
        case 0: slot = -1; break;
        case 1: slot = INT32_MIN; break;
        case 2: slot = int32_t(tp); break;
        case 3: slot = int32_t(std::min<int64_t>(INT32_MAX, tp + 1 + below(1 << 20))); break;
        case 4: slot = INT32_MAX; break;
        case 5: slot = int32_t(-2 - below(1000)); break;
        case 6: slot = g + 1 < tp ? int32_t(g + 1 + below(tp - g - 1)) : -1; break;                // future
        default: slot = seg_begin > 0 ? int32_t(below(seg_begin)) : (g + 1 < tp ? int32_t(g + 1) : -1);  // other segment
      }
    }
    // duplicate_indices: in half of the rows with a valid slot, one or two copies of a valid index
    // over other slots after the invalid prefix (S(g) is a set: each counts once).
    if (c.init.duplicate_indices && !valid_slots.empty() && kw - invalid_prefix >= 2) {
      uint64_t dc = uint64_t(g) * 8;
      if (dup.uniform(dc++) < 0.5) {
        const int64_t copies = 1 + int64_t(dup.below(dc++, 2));
        for (int64_t n = 0; n < copies; ++n) {
          const int64_t from = valid_slots[dup.below(dc++, valid_slots.size())];
          int64_t to = invalid_prefix + int64_t(dup.below(dc++, uint64_t(kw - invalid_prefix - 1)));
          if (to >= from) ++to;  // any slot but the source
          out.at(g, to) = out.at(g, from);
        }
      }
    }
  }
  return out;
}

// ---- random cases -----------------------------------------------------------------------------

namespace {

struct Draw {
  Stream s;
  uint64_t ctr;
  double u() { return s.uniform(ctr++); }
  bool chance(double p) { return u() < p; }
  int64_t between(int64_t lo, int64_t hi) { return lo + int64_t(s.below(ctr++, uint64_t(hi - lo + 1))); }
  template <class T>
  T pick(const std::vector<T>& v) { return v[s.below(ctr++, v.size())]; }
};

struct Profile {
  int64_t max_seqs, max_len, max_tp;
  std::vector<int64_t> cp, H, Dn, R, C, Dv, HI, DI, K;
  double adversarial;  // probability of each adversarial feature
  // The regimes of SPEC.md §10 "shapes the kernels specialize" (0: the profile draws only the
  // general regime above, and spends no draw on them, so smoke and default keep their cases).
  double production_widths = 0;  // a case at production widths (C 512, R 64, Dn 128, Dv 128, DI 128, HI 64|32), H 64|128
  double sparse = 0;             // a case in the sparse regime: Tp >= 4·K, K 512|1024|2048, small widths
  double structures = 0;         // each of: hot keys, duplicated injected indices, an all-padding CP rank
  double max_work = 0;           // cap on oracle_work() (multiply-adds of one reference run); 0 = none
  double max_bytes = 0;          // cap on the case's footprint (harness/bounds.hpp); 0 = none
};

// Measured with `dsa-parity fuzz --backend lowp --profile nightly` on the 2-core development
// machine: about 0.1–0.15 units of oracle_work per ns of CPU oracle there (exact + lowp runs),
// so 6e8 is 3–5 s on 2 cores and well under a second on the device host's 16 (README "Profiles").
constexpr double kNightlyMaxWork = 6e8;

const Profile& profile_spec(const std::string& name) {
  static const Profile smoke{3, 20, 48, {1, 2, 3, 4, 8}, {1, 2, 3, 4}, {4, 8, 16}, {2, 4, 8}, {8, 16, 32},
                             {4, 8, 16}, {1, 2, 4}, {4, 8, 16}, {1, 2, 3, 4, 8, 16, 64}, 0.35};
  static const Profile def{5, 100, 384, {1, 2, 3, 4, 8}, {1, 2, 4, 8}, {8, 16, 32}, {4, 8, 16}, {16, 32, 64},
                           {8, 16, 32}, {1, 2, 4, 8}, {8, 16, 32}, {1, 4, 8, 16, 32, 64, 128, 512}, 0.3};
  static const Profile nightly{8, 400, 1536, {1, 2, 3, 4, 8}, {1, 2, 4, 8, 16}, {16, 32, 64}, {8, 16, 32, 64},
                               {32, 64, 128, 256}, {16, 32, 64}, {1, 2, 4, 8, 16}, {16, 32, 64},
                               {1, 16, 64, 256, 2048}, 0.6, 0.4, 0.35, 0.25, kNightlyMaxWork};
  // Dims are overridden by a model's shape (DeepSeek-V3.2 or GLM-5); S 4K–32K real tokens.
  // The footprint cap (a constant, so that a case does not depend on the machine that draws it)
  // keeps every case within the H200 host's default --max-bytes (half of its 128 GiB): at H 128
  // that is S ≤ about 28K (the three fp64 results hold O_lat, [S, H, C], each).
  static const Profile production{4,    32768, 36864, {1, 2, 4, 8}, {}, {}, {}, {}, {}, {}, {}, {2048}, 0.15,
                                  0.0,  0.0,   0.0,   0.0,          56.0 * double(uint64_t{1} << 30)};
  if (name == "smoke") return smoke;
  if (name == "default") return def;
  if (name == "nightly") return nightly;
  if (name == "production") return production;
  std::string all;
  for (auto& p : profiles()) all += (all.empty() ? "" : "|") + p;
  throw InvalidInput("profile", "must be one of " + all + ", got '" + name + "'");
}

bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

// One length from the traps of SPEC.md §10: 0, 1, primes, not divisible by 2·cp, shorter than K.
int64_t draw_length(Draw& d, const Profile& pr, int64_t cp, int64_t k) {
  const double r = d.u();
  if (r < 0.08) return 0;
  if (r < 0.16) return 1;
  if (r < 0.32) {
    int64_t n = d.between(2, std::max<int64_t>(2, pr.max_len));
    while (!is_prime(n)) --n;
    return n;
  }
  if (r < 0.46) return d.between(1, std::clamp<int64_t>(k - 1, 1, pr.max_len));
  if (r < 0.60) {
    const int64_t m = 2 * cp, hi = std::max<int64_t>(0, (pr.max_len - m) / m);
    return d.between(0, hi) * m + d.between(1, m - 1);
  }
  return d.between(0, pr.max_len);
}

bool allows(const std::vector<Path>& paths, Path p) { return std::find(paths.begin(), paths.end(), p) != paths.end(); }

// Explicit with probability 0.3 when both paths are allowed, else the one allowed. The draw is
// spent either way so that the draws after it (and so the rest of the case) do not depend on
// the restriction.
Path draw_path(Draw& d, const std::vector<Path>& allowed) {
  const Path drawn = d.chance(0.3) ? Path::explicit_ : Path::absorbed;
  return allows(allowed, drawn) ? drawn : allowed.front();
}

// " paths=absorbed" when the run is restricted to fewer than both paths: case i of such a run
// differs from case i of an unrestricted one, and the note says how it was made.
std::string paths_note(const std::vector<Path>& paths) {
  if (allows(paths, Path::absorbed) && allows(paths, Path::explicit_)) return "";
  return std::string(" paths=") + name(paths.front());
}

}  // namespace

const std::vector<std::string>& profiles() {
  static const std::vector<std::string> p = {"smoke", "default", "nightly", "production"};
  return p;
}

namespace {

enum class Regime { general, production_widths, sparse };

int64_t total_length(const std::vector<int64_t>& v) {
  int64_t t = 0;
  for (int64_t x : v) t += x;
  return t;
}

// The contiguous layout with the smallest pad_multiple that leaves the last rank only padding:
// Tp = cp·pm ≥ T·cp/(cp−1), the last rank's rows [(cp−1)·pm, cp·pm) all ≥ T.
void make_all_padding_rank(Problem& p) {
  p.cp.size = std::max<int64_t>(p.cp.size, 2);
  p.cp.layout = Layout::contiguous;
  const int64_t t = std::max<int64_t>(1, total_length(p.seqlens));
  p.cp.pad_multiple = (t + p.cp.size - 2) / (p.cp.size - 1);
}

}  // namespace

double oracle_work(const Problem& p) {
  const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
  const Dims& d = p.dims;
  const int64_t kw = topk_width(p.topk, L.tp);
  double vis = 0, sel = 0;
  for (int64_t g = 0; g < L.tp; ++g) {
    const int64_t n = L.key_end(g) - L.key_begin(g);
    vis += double(n);
    sel += double(std::min(kw, n));
  }
  const double H = double(d.H), C = double(d.C);
  const double loss_pairs = p.loss == LossMode::dense ? vis : p.loss == LossMode::sparse ? sel : 0;
  return 3.0 * double(L.tp) * H * C * double(d.Dn + d.Dv)  // Q~ and O projections, forward and backward
         + 3.0 * sel * H * (2 * C + double(d.R))          // attention forward and backward over S(g)
         + 2.0 * vis * double(d.HI * d.DI)                // indexer scores (and dq_I, dk_I)
         + 2.0 * loss_pairs * H * (C + double(d.R))       // the loss's attention distribution
         + 4.0 * double(p.cp.size) * H * C * double(d.Dn + d.Dv);  // per-rank dW_UK, dW_UV: zero, reduce
}

Case random_case(const std::string& profile, uint64_t master_seed, int64_t index, const std::vector<Path>& paths,
                 std::optional<int64_t> cp) {
  DrawLimits lim;
  lim.paths = paths;
  lim.cp = cp;
  return random_case(profile, master_seed, index, lim);
}

Case random_case(const std::string& profile, uint64_t master_seed, int64_t index, const DrawLimits& lim) {
  const Profile& pr = profile_spec(profile);
  const std::vector<Path>& paths = lim.paths;
  const std::optional<int64_t> cp = lim.cp;
  require(!paths.empty(), "paths", "at least one MLA path (absorbed, explicit) must be allowed");
  require(!cp || *cp >= 1, "cp", "the CP size of random cases must be >= 1");
  require(lim.max_cp >= 0, "max_cp", "must be >= 0 (0: any)");
  require(!lim.layouts.empty(), "layouts", "at least one CP layout (zigzag, contiguous) must be allowed");
  require(!lim.pad_rows.empty(), "pad_rows", "at least one pad-row mode (attend, masked) must be allowed");
  require(lim.max_tokens >= 0, "max_tokens", "must be >= 0 (0: any)");
  Draw d{Stream(master_seed, "random_case/" + profile), uint64_t(index) << 12};
  Case c;
  Problem& p = c.problem;
  const philox::Block sb = d.s.block(d.ctr++);
  c.seed = (uint64_t{sb[0]} << 32) | sb[1];

  // The regime draw is spent only by profiles that have regimes (smoke and default are unchanged).
  Regime regime = Regime::general;
  if (pr.production_widths + pr.sparse > 0) {
    const double r = d.u();
    regime = r < pr.production_widths ? Regime::production_widths
             : r < pr.production_widths + pr.sparse ? Regime::sparse
                                                     : Regime::general;
  }

  Dims& dm = p.dims;
  if (profile == "production") {
    if (d.chance(0.5))
      dm = {128, 128, 64, 512, 128, 64, 128};  // DeepSeek-V3.2
    else
      dm = {64, 192, 64, 512, 256, 32, 128};  // GLM-5
  } else if (regime == Regime::production_widths) {
    // DeepSeek-V3.2's widths, GLM-5's (Dn 192, Dv 256) in 15% of them; H and HI either model's.
    const bool glm = d.chance(0.15);
    dm = {d.pick(std::vector<int64_t>{64, 128}), glm ? 192 : 128, 64, 512, glm ? 256 : 128,
          d.pick(std::vector<int64_t>{64, 32}), 128};
  } else if (regime == Regime::sparse) {
    // Small widths: the rows see thousands of keys each.
    dm = {d.pick(std::vector<int64_t>{1, 2, 4}), d.pick(std::vector<int64_t>{8, 16}), d.pick(std::vector<int64_t>{4, 8}),
          d.pick(std::vector<int64_t>{16, 32}), d.pick(std::vector<int64_t>{8, 16}), d.pick(std::vector<int64_t>{1, 2}),
          d.pick(std::vector<int64_t>{8, 16})};
  } else {
    dm = {d.pick(pr.H), d.pick(pr.Dn), d.pick(pr.R), d.pick(pr.C), d.pick(pr.Dv), d.pick(pr.HI), d.pick(pr.DI)};
  }
  if (regime == Regime::sparse) {
    const double k = d.u();
    p.topk = k < 0.6 ? 512 : k < 0.9 ? 1024 : 2048;
  } else {
    p.topk = d.pick(pr.K);
  }
  p.softmax_scale = 1.0 / std::sqrt(double(dm.Dn + dm.R));  // Megatron m²/sqrt(Dn+R), m = 1

  // A limit replaces the value it forbids once drawn, so an unlimited run reproduces every earlier
  // seed (the later draws follow the value that stands).
  p.cp.size = d.pick(pr.cp);
  if (cp) p.cp.size = *cp;
  else if (lim.max_cp > 0) p.cp.size = std::min(p.cp.size, lim.max_cp);
  p.cp.layout = d.chance(0.5) ? Layout::zigzag : Layout::contiguous;
  if (!lim.allows(p.cp.layout)) p.cp.layout = lim.layouts.front();
  if (d.chance(0.2))
    p.cp.pad_multiple = p.cp.layout == Layout::zigzag ? 2 * p.cp.size * d.between(1, 3) : d.between(2, 4);
  p.pad_rows = d.chance(0.4) ? PadRows::masked : PadRows::attend;
  if (!lim.allows(p.pad_rows)) p.pad_rows = lim.pad_rows.front();

  if (profile == "production") {
    // S real tokens in 1–4 sequences (cut points uniform), S 4K–32K.
    const int64_t S = d.between(4096, 32768), nseq = d.between(1, pr.max_seqs);
    std::vector<int64_t> cuts = {0, S};
    for (int64_t i = 1; i < nseq; ++i) cuts.push_back(d.between(0, S));
    std::sort(cuts.begin(), cuts.end());
    for (size_t i = 1; i < cuts.size(); ++i) p.seqlens.push_back(cuts[i] - cuts[i - 1]);
  } else if (regime == Regime::sparse) {
    // One sequence of 4K … 4.5K tokens (so Tp ≥ 4·K and its rows select), then up to two of the
    // profile's trap lengths (0, 1, primes, shorter than K).
    p.seqlens.push_back(d.between(4 * p.topk, 4 * p.topk + p.topk / 2));
    const int64_t extra = d.between(0, 2);
    for (int64_t i = 0; i < extra; ++i) p.seqlens.push_back(draw_length(d, pr, p.cp.size, p.topk));
  } else {
    const int64_t nseq = d.between(1, pr.max_seqs);
    for (int64_t i = 0; i < nseq; ++i) p.seqlens.push_back(draw_length(d, pr, p.cp.size, p.topk));
  }
  // The loss mode is drawn here so that the work cap below can count it (it used to be drawn after
  // the lengths; the draw order of the other profiles is unchanged).
  const bool early_loss = pr.max_work > 0;
  auto draw_loss = [&] {
    const double ls = d.u();
    p.loss = ls < 0.15 ? LossMode::off : ls < 0.70 ? LossMode::sparse : LossMode::dense;
  };
  if (early_loss) draw_loss();
  const int64_t max_tp = lim.max_tokens > 0 ? std::min(pr.max_tp, lim.max_tokens) : pr.max_tp;
  auto fits = [&] {
    if (make_layout(p.seqlens, p.cp, p.pad_rows).tp > max_tp) return false;
    if (pr.max_bytes > 0 && double(footprint(p).bytes) > pr.max_bytes) return false;
    return pr.max_work <= 0 || oracle_work(p) <= pr.max_work;
  };
  // Keep the stream within the profile: halve the longest sequence until it fits (production:
  // trim its longest sequence by an eighth instead, so that S stays above 4K, or above half the
  // backend's token limit when that is lower).
  const int64_t production_floor = std::min<int64_t>(4096, max_tp / 2);
  auto shrink_to_fit = [&] {
    for (;;) {
      if (profile == "production" && !fits() && total_length(p.seqlens) > production_floor) {
        auto longest = std::max_element(p.seqlens.begin(), p.seqlens.end());
        *longest -= std::min(*longest / 8 + 1, total_length(p.seqlens) - production_floor);
        continue;
      }
      if (total_length(p.seqlens) == 0) p.seqlens.back() = 1;
      if (fits()) break;
      auto longest = std::max_element(p.seqlens.begin(), p.seqlens.end());
      if (*longest <= 1) {  // padding alone exceeds the budget: fewer sequences, no extra padding
        if (p.seqlens.size() == 1 && p.cp.pad_multiple == 0) {  // one token: fewer ranks, or as small as it gets
          if (p.cp.size == 1 || cp) break;
          p.cp.size = p.cp.size == 3 ? 1 : p.cp.size / 2;
          continue;
        }
        p.seqlens.resize(1);
        p.cp.pad_multiple = 0;
        continue;
      }
      *longest /= 2;
    }
  };
  if (regime == Regime::sparse) {
    // Keep Tp ≥ 4·K: the widths shrink instead of the lengths.
    while (pr.max_work > 0 && oracle_work(p) > pr.max_work && (dm.H > 1 || dm.C > 8 || dm.HI > 1 || dm.DI > 4)) {
      if (dm.H > 1) dm.H /= 2;
      else if (dm.C > 8) dm.C /= 2;
      else if (dm.HI > 1) dm.HI /= 2;
      else dm.DI /= 2;
    }
    if (p.loss == LossMode::dense && pr.max_work > 0 && oracle_work(p) > pr.max_work) p.loss = LossMode::sparse;
    // A backend's token limit below 4·K: the lengths shrink after all (the case leaves the regime).
    if (lim.max_tokens > 0 && make_layout(p.seqlens, p.cp, p.pad_rows).tp > lim.max_tokens) shrink_to_fit();
  } else {
    shrink_to_fit();
  }

  if (!early_loss) draw_loss();
  p.coeff = d.chance(0.7) ? 1.0 : double(d.between(1, 20)) / 10.0;
  p.path = draw_path(d, paths);
  p.relu = d.chance(0.85);

  InitSpec& in = c.init;
  in.distribution = d.chance(0.15) ? "uniform" : "normal";
  in.scale = d.chance(0.9) ? 1.0 : d.pick(std::vector<double>{0.25, 4.0});
  const double a = pr.adversarial;
  in.score_ties = d.chance(a);
  // One indexer head: ties at 0 on whole rows (not where the widths are the point).
  const bool keep_widths = profile == "production" || regime == Regime::production_widths;
  if (in.score_ties && d.chance(0.5) && !keep_widths) dm.HI = 1;
  in.zero_rows = d.chance(a);
  in.large_logits = d.chance(a / 2);
  in.huge_future_k_I = d.chance(a / 2);
  in.poison_pad_keys = p.pad_rows == PadRows::masked && d.chance(0.6);
  in.inject_indices = d.chance(a);
  if (pr.structures > 0) {  // drawn last: the draws above are those of a profile without structures
    in.hot_keys = d.chance(pr.structures);
    in.duplicate_indices = d.chance(pr.structures);
    if (in.duplicate_indices) in.inject_indices = true;
    // An all-padding rank needs the contiguous layout and two ranks at least.
    const bool padding_rank_allowed = lim.allows(Layout::contiguous) && lim.allows_cp(std::max<int64_t>(p.cp.size, 2));
    if (d.chance(pr.structures) && (!cp || *cp > 1) && padding_rank_allowed) {
      const CpSpec before = p.cp;
      make_all_padding_rank(p);
      if (!fits()) p.cp = before;  // the padding would take the case past the profile's budget
    }
  }
  c.note = "random_case profile=" + profile + " master_seed=" + std::to_string(master_seed) +
           " index=" + std::to_string(index) + paths_note(paths) + (cp ? " cp=" + std::to_string(*cp) : "") +
           (limits_text(lim).empty() ? "" : " limits=(" + limits_text(lim) + ")");
  return c;
}

}  // namespace dsa
