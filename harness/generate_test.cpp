#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include <Eigen/Core>
#include <gtest/gtest.h>

#include "harness/bounds.hpp"
#include "harness/generate.hpp"
#include "core/bf16.hpp"
#include "harness/philox.hpp"
#include "core/errors.hpp"
#include "core/rank_shard.hpp"

namespace dsa {
namespace {
namespace generate_test {  // its own names in a unity build (README "Layout of the source")

const std::string kData = std::string(DSA_SOURCE_DIR) + "/harness/testdata/";

// Random123's tests/kat_vectors, the three philox4x32 10 lines.
TEST(Philox, KnownAnswers) {
  using philox::philox4x32_10;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (philox::Block{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (philox::Block{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (philox::Block{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(round_bf16(1.0), 1.0);
  EXPECT_EQ(round_bf16(1.0 + 0x1p-8), 1.0);                      // tie, even stays
  EXPECT_EQ(round_bf16(1.0 + 3 * 0x1p-8), 1.0 + 0x1p-6);         // tie, odd rounds up
  EXPECT_EQ(round_bf16(1.0 + 0x1p-8 + 0x1p-40), 1.0 + 0x1p-7);   // just above the tie: no double rounding
  EXPECT_EQ(round_bf16(-(1.0 + 0x1p-8 + 0x1p-40)), -(1.0 + 0x1p-7));
  EXPECT_EQ(round_bf16(0x1.FFp0), 2.0);                          // carries into the exponent
  EXPECT_TRUE(std::isinf(round_bf16(3.5e38)));
  EXPECT_EQ(round_bf16(0x1p-130 * 1.3), 0x1p-130 * 1.25);         // subnormal bf16 grid is 2^-133
  // Agrees with Eigen's bf16 (also round-to-nearest-even) on every float it is given.
  philox::Stream s(3, "bf16 test");
  for (int i = 0; i < 20000; ++i) {
    const float f = float(s.normal(i) * std::ldexp(1.0, int(i % 40) - 20));
    EXPECT_EQ(round_bf16(f), double(float(Eigen::bfloat16(f)))) << f;
  }
}

Case small_case() { return load_case(kData + "valid_full.json"); }

bool is_bf16(double v) { return std::isnan(v) || round_bf16(v) == v; }

TEST(Generate, IsAPureFunctionOfSeedNameAndIndex) {
  Case a = small_case();
  a.init = InitSpec{};
  const Inputs x = generate_inputs(a), y = generate_inputs(a);
  x.for_each([&](const std::string& n, const TensorD& t) {
    const TensorD* other = nullptr;
    y.for_each([&](const std::string& m, const TensorD& u) { if (m == n) other = &u; });
    ASSERT_EQ(std::memcmp(t.data.data(), other->data.data(), t.data.size() * sizeof(double)), 0) << n;
    for (double v : t.data) ASSERT_TRUE(std::isfinite(v) && is_bf16(v)) << n;
  });
  // A longer stream leaves the leading elements of every row-major tensor unchanged.
  Case b = a;
  b.problem.seqlens.push_back(9);
  const Inputs z = generate_inputs(b);
  for (int64_t i = 0; i < x.w.size(); ++i) ASSERT_EQ(x.w.data[i], z.w.data[i]);
  for (int64_t i = 0; i < x.q_nope.size(); ++i) ASSERT_EQ(x.q_nope.data[i], z.q_nope.data[i]);
  // Another seed, other values; another name, other values.
  b = a;
  b.seed = a.seed + 1;
  EXPECT_NE(generate_inputs(b).c.data, x.c.data);
  EXPECT_NE(x.c.data[0], x.k_pe.data[0]);
}

TEST(Generate, PinnedValuesAreTheSameOnEveryBuild) {
  Case a = small_case();
  a.init = InitSpec{};
  const Inputs x = generate_inputs(a);
  // The first elements for seed 7 (a regression pin: any platform or build must give these bits).
  const double q_nope[4] = {-0x1.62p+0, 0x1.bap-1, -0x1.a2p-4, 0x1.6ap+1};
  const double W_UK[4] = {0x1.12p-6, -0x1.34p-8, 0x1.0cp+0, -0x1.d2p-4};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(x.q_nope.data[i], q_nope[i]) << i;
    EXPECT_EQ(x.W_UK.data[i], W_UK[i]) << i;
  }
}

TEST(Generate, ScalesGiveUnitLogitsAndMomentsMatch) {
  Case a = small_case();
  a.init = InitSpec{};
  a.problem.seqlens = {400};
  const Inputs x = generate_inputs(a);
  double m = 0, v = 0;
  for (double e : x.q_nope.data) m += e, v += e * e;
  m /= x.q_nope.size();
  v = v / x.q_nope.size() - m * m;
  EXPECT_NEAR(m, 0, 0.03);
  EXPECT_NEAR(std::sqrt(v), 1, 0.03);
  a.init.distribution = "uniform";
  a.init.scale = 2;
  const Inputs u = generate_inputs(a);
  double mx = 0;
  for (double e : u.c.data) mx = std::max(mx, std::fabs(e));
  EXPECT_LE(mx, 2 * std::sqrt(3.0) * 1.01);
  EXPECT_GT(mx, 2 * std::sqrt(3.0) * 0.95);
}

TEST(Generate, AdversarialFeatures) {
  Case a = small_case();  // score_ties, zero_rows, huge_future_k_I, poison_pad_keys (masked)
  a.problem.seqlens = {5, 11, 7};
  const StreamLayout L = make_layout(a.problem.seqlens, a.problem.cp, a.problem.pad_rows);
  const Inputs x = generate_inputs(a);
  const int64_t hi = a.problem.dims.HI, di = a.problem.dims.DI;
  int neg_rows = 0, dup_rows = 0, zero_k = 0, zero_q = 0;
  for (int64_t g = 0; g < L.tp; ++g) {
    if (!L.is_real(g)) {  // poison: NaN in every key-side row of a pad row
      EXPECT_TRUE(std::isnan(x.c.at(g, 0)) && std::isnan(x.k_pe.at(g, 0)) && std::isnan(x.k_I.at(g, 0)));
      continue;
    }
    for (double v : std::vector<double>(x.c.row(g), x.c.row(g) + x.c.row_size())) EXPECT_FALSE(std::isnan(v));
    bool all_neg = true, zk = true;
    for (int64_t k = 0; k < hi * di; ++k) all_neg = all_neg && x.q_I.row(g)[k] <= 0;
    for (int64_t d = 0; d < di; ++d) zk = zk && x.k_I.at(g, d) == 0;
    for (int64_t h = 0; h < hi; ++h) {
      bool zq = true;
      for (int64_t d = 0; d < di; ++d) zq = zq && x.q_I.at(g, h, d) == 0;
      zero_q += zq;
    }
    neg_rows += all_neg;
    zero_k += zk;
    dup_rows += g > 0 && L.is_real(g - 1) && !zk && std::equal(x.k_I.row(g), x.k_I.row(g) + di, x.k_I.row(g - 1));
    // Huge values only in rows no earlier query sees: the last row of a segment.
    const bool huge = std::fabs(x.k_I.at(g, 0)) >= 1e4;
    EXPECT_EQ(huge, g == L.cu[L.seg[g] + 1] - 1) << g;
  }
  EXPECT_GT(neg_rows, 0);
  EXPECT_GT(dup_rows, 0);
  EXPECT_GT(zero_k, 0);
  EXPECT_GT(zero_q, 0);
  for (double v : x.w.data) EXPECT_GE(v, 0);
  // Poison needs masked pad rows.
  a.problem.pad_rows = PadRows::attend;
  EXPECT_THROW(generate_inputs(a), InvalidInput);
}

// What a rank of --backend cuda --comm mpi generates, its shard, is the rows of the whole case bit
// for bit whatever the features: a k_I row copied from the row before it (score_ties), that row
// another rank's, and copies of copies included; zigzag and contiguous, cp 1 to 4.
TEST(Generate, RankShardsAreTheRowsOfTheWholeCase) {
  int64_t compared = 0;
  for (const std::string profile : {"smoke", "default"})
    for (int64_t i = 0; i < 24; ++i) {
      Case c = random_case(profile, 7, i, all_paths(), 1 + i % 4);
      c.init.score_ties = i % 4 != 3;
      c.init.zero_rows = i % 2 == 0;
      c.init.hot_keys = i % 3 == 0;
      c.init.huge_future_k_I = i % 2 == 1;
      c.init.poison_pad_keys = c.problem.pad_rows == PadRows::masked && i % 3 != 1;
      c.init.distribution = i % 5 == 0 ? "uniform" : "normal";
      const StreamLayout L = make_layout(c.problem.seqlens, c.problem.cp, c.problem.pad_rows);
      const Inputs whole = generate_inputs(c);
      for (int64_t r = 0; r < L.cp; ++r) {
        const Inputs shard = generate_rank_inputs(c, r), want = shard_inputs(whole, L.rank_rows[r]);
        want.for_each([&](const std::string& name, const TensorD& w) {
          shard.for_each([&](const std::string& n, const TensorD& t) {
            if (n != name) return;
            ASSERT_EQ(t.shape, w.shape) << describe(c) << " rank " << r << " " << name;
            EXPECT_EQ(std::memcmp(t.data.data(), w.data.data(), t.data.size() * sizeof(double)), 0)
                << describe(c) << " rank " << r << " " << name;
            ++compared;
          });
        });
      }
      EXPECT_THROW(generate_rank_inputs(c, L.cp), InvalidInput);
    }
  EXPECT_GE(compared, 48 * 10);
}

TEST(Generate, InjectedIndicesMixValidAndEveryKindOfInvalid) {
  Case a = small_case();
  a.problem.seqlens = {5, 11, 30};
  a.problem.topk = 12;
  a.problem.pad_rows = PadRows::attend;
  a.init.poison_pad_keys = false;
  const StreamLayout L = make_layout(a.problem.seqlens, a.problem.cp, a.problem.pad_rows);
  const auto idx = injected_indices(a);
  ASSERT_TRUE(idx.has_value());
  EXPECT_EQ(idx->shape, (Shape{L.tp, 12}));
  EXPECT_EQ(idx->data, injected_indices(a)->data);
  int rows_none = 0, rows_prefix_invalid = 0, rows_valid = 0;
  std::set<std::string> kinds;
  for (int64_t g = 0; g < L.tp; ++g) {
    std::set<int32_t> valid;
    int64_t first_valid = -1;
    for (int64_t k = 0; k < 12; ++k) {
      const int32_t t = idx->at(g, k);
      if (t >= 0 && t < L.tp && L.visible(g, t)) {
        EXPECT_TRUE(valid.insert(t).second) << "duplicate valid key " << t << " in row " << g;
        if (first_valid < 0) first_valid = k;
        continue;
      }
      if (t == -1) kinds.insert("-1");
      else if (t == INT32_MIN) kinds.insert("INT_MIN");
      else if (t == L.tp) kinds.insert("Tp");
      else if (t > L.tp) kinds.insert("huge");
      else if (t < -1) kinds.insert("negative");
      else if (t > g) kinds.insert("future");
      else kinds.insert("other segment");
    }
    rows_none += valid.empty();
    rows_valid += !valid.empty();
    rows_prefix_invalid += first_valid >= 6;
  }
  EXPECT_EQ(kinds.size(), 7u);
  EXPECT_GT(rows_none, 0);
  EXPECT_GT(rows_valid, 0);
  EXPECT_GT(rows_prefix_invalid, 0);
  a.init.inject_indices = false;
  EXPECT_FALSE(injected_indices(a).has_value());
}

TEST(RandomCase, IsPureValidAndDrawsEveryFeature) {
  std::map<std::string, int> seen;
  for (int64_t i = 0; i < 300; ++i) {
    const Case c = random_case("smoke", 1, i);
    ASSERT_EQ(to_json(c), to_json(random_case("smoke", 1, i)));
    const Case back = case_from_json(to_json(c));  // every generated case validates
    EXPECT_EQ(to_json(back), to_json(c));
    const Problem& p = c.problem;
    const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
    EXPECT_LE(L.tp, 48);
    EXPECT_LE(p.dims.H, 4);
    EXPECT_LE(p.dims.C, 32);
    EXPECT_DOUBLE_EQ(p.softmax_scale, 1 / std::sqrt(double(p.dims.Dn + p.dims.R)));
    for (int64_t len : p.seqlens) {
      if (len == 0) seen["len0"]++;
      if (len == 1) seen["len1"]++;
      if (len > 2 && len % 2 && len % 3 && len % 5) seen["prime"]++;
      if (len % (2 * p.cp.size)) seen["not divisible by 2cp"]++;
      if (len < p.topk) seen["shorter than K"]++;
    }
    seen["cp" + std::to_string(p.cp.size)]++;
    seen[name(p.cp.layout)]++;
    seen[name(p.pad_rows)]++;
    seen[name(p.loss)]++;
    seen[name(p.path)]++;
    seen[p.relu ? "relu" : "identity"]++;
    if (p.cp.pad_multiple) seen["pad_multiple"]++;
    if (p.seqlens.size() > 1) seen["packed"]++;
    const InitSpec& in = c.init;
    if (in.score_ties) seen["ties"]++;
    if (in.zero_rows) seen["zero"]++;
    if (in.large_logits) seen["large"]++;
    if (in.huge_future_k_I) seen["huge"]++;
    if (in.poison_pad_keys) seen["poison"]++;
    if (in.inject_indices) seen["inject"]++;
    if (in.distribution == "uniform") seen["uniform"]++;
  }
  for (const char* f : {"len0", "len1", "prime", "not divisible by 2cp", "shorter than K", "cp1", "cp2", "cp3", "cp4",
                        "cp8", "zigzag", "contiguous", "attend", "masked", "off", "sparse", "dense", "absorbed",
                        "explicit", "relu", "identity", "pad_multiple", "packed", "ties", "zero", "large", "huge",
                        "poison", "inject", "uniform"})
    EXPECT_GT(seen[f], 0) << f;
  EXPECT_NE(to_json(random_case("smoke", 1, 0)), to_json(random_case("smoke", 2, 0)));
  EXPECT_THROW(random_case("huge", 1, 0), InvalidInput);
}

TEST(RandomCase, ProductionUsesModelShapes) {
  std::set<int64_t> heads;
  for (int64_t i = 0; i < 40; ++i) {
    const Case c = random_case("production", 5, i);
    const Dims& d = c.problem.dims;
    heads.insert(d.H);
    EXPECT_EQ(c.problem.topk, 2048);
    EXPECT_EQ(d.C, 512);
    EXPECT_EQ(d.R, 64);
    EXPECT_EQ(d.DI, 128);
    if (d.H == 128) EXPECT_TRUE(d.Dn == 128 && d.Dv == 128 && d.HI == 64);
    else EXPECT_TRUE(d.Dn == 192 && d.Dv == 256 && d.HI == 32);
    // S 4K–32K real tokens (issue 12), padding on top.
    int64_t S = 0;
    for (int64_t len : c.problem.seqlens) S += len;
    EXPECT_GE(S, 4096);
    EXPECT_LE(S, 32768);
    EXPECT_LE(make_layout(c.problem.seqlens, c.problem.cp, c.problem.pad_rows).tp, 36864);
  }
  EXPECT_EQ(heads, (std::set<int64_t>{64, 128}));
  // Production cases are sized for the H200 host (default --max-bytes 64 GiB, half its memory).
  const Limits saved = limits();
  limits().max_bytes = uint64_t{64} << 30;
  for (auto& p : profiles()) EXPECT_NO_THROW(case_from_json(to_json(random_case(p, 9, 3))));
  for (int64_t i = 0; i < 40; ++i) EXPECT_NO_THROW(case_from_json(to_json(random_case("production", 5, i)))) << i;
  limits() = saved;
}

uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// 64 cases of a profile under the default paths: a digest of their JSON and each one's path
// ('a' absorbed, 'e' explicit).
std::pair<uint64_t, std::string> digest(const std::string& profile, uint64_t seed) {
  uint64_t h = 1469598103934665603ull;
  std::string paths;
  for (int64_t i = 0; i < 64; ++i) {
    const Case c = random_case(profile, seed, i);
    h = fnv1a(to_json(c).dump(), h);
    paths += c.problem.path == Path::explicit_ ? 'e' : 'a';
  }
  return {h, paths};
}

// Pinned before random cases took the allowed paths (generator at d0d219c): existing seeds must
// keep reproducing exactly the same cases, paths included (smoke and default since then; nightly
// and production since issue 12).
TEST(RandomCase, DefaultPathsReproduceEarlierSeeds) {
  const std::tuple<const char*, uint64_t, uint64_t, const char*> pins[] = {
      {"smoke", 1, 0x6f1c7592319e31c9ull, "aeaeaaeaaaaeaaaeaaeaeaaeaaaaeeeaaaeaaaeaeaaaeaaaeaaaaaaeaeaeaeee"},
      {"smoke", 4, 0x9b55c09910260498ull, "aaaaaeeaeeaaaeeeaaaeeaaaaaaaeaeaaaaaeaaaaaaeeaaeeaaaaaeaeeaaaeaa"},
      {"default", 1, 0x6308d7eabd9f49d1ull, "aaaeaaeeaaeeaaeaaeaaaaaaaeaeaeaaeaaaeaaaaaaeaaeaaaeeaaaaaaaaaeea"},
      // nightly and production re-pinned by issue 12 (regimes, structures, S 4K–32K).
      {"nightly", 4, 5305486567787915149ull, "eaaaeaaaaaaeeaeaaaeaaaaaeeeaeeeaeeaaaaaeaaaaaaeaaaaeeeaaeaaeaeae"},
      {"production", 1, 4373075987499520264ull, "aeaaaeaaaeaaaeaaeaaaaaeaaaaaaaaaaaaeeaeaaaaaeaaaaeeaaaaeaaaaaeaa"},
  };
  for (auto& [profile, seed, hash, paths] : pins) {
    const auto [h, p] = digest(profile, seed);
    EXPECT_EQ(p, paths) << profile << " seed " << seed;
    EXPECT_EQ(h, hash) << profile << " seed " << seed;
  }
  EXPECT_EQ(to_json(random_case("smoke", 1, 5, all_paths())), to_json(random_case("smoke", 1, 5)));
}

TEST(RandomCase, DrawsOnlyTheAllowedPaths) {
  const std::vector<Path> absorbed = {Path::absorbed}, explicit_only = {Path::explicit_};
  std::map<Path, int> by_default;
  for (uint64_t seed = 1; seed <= 500; ++seed)
    for (const char* profile : {"smoke", "default"}) {
      const Case any = random_case(profile, seed, int64_t(seed % 7));
      ++by_default[any.problem.path];
      const Case a = random_case(profile, seed, int64_t(seed % 7), absorbed);
      ASSERT_EQ(a.problem.path, Path::absorbed) << profile << " seed " << seed;
      ASSERT_EQ(random_case(profile, seed, int64_t(seed % 7), explicit_only).problem.path, Path::explicit_);
      // Only the path changes: the draw is spent either way, so shapes and features are those of
      // the unrestricted case, and the note says how the case was made.
      Case same = any;
      same.problem.path = Path::absorbed;
      same.note += " paths=absorbed";
      ASSERT_EQ(to_json(a), to_json(same)) << profile << " seed " << seed;
    }
  // Both paths by default, explicit about 30% of the time (1000 draws: 300 ± 14.5).
  EXPECT_GT(by_default[Path::absorbed], 0);
  EXPECT_GT(by_default[Path::explicit_], 230);
  EXPECT_LT(by_default[Path::explicit_], 370);
  try {
    random_case("smoke", 1, 0, std::vector<Path>{});
    ADD_FAILURE() << "no path allowed must be refused";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(e.field, "paths");
  }
}

// A backend's limits (harness/draw_limits.hpp): unlimited ones reproduce every seed; under limits
// every case lies within them (production keeps its widths and heads, shorter).
TEST(RandomCase, DrawsWithinTheBackendsLimits) {
  for (auto& p : profiles())
    for (int64_t i = 0; i < 12; ++i)
      ASSERT_EQ(to_json(random_case(p, 3, i, DrawLimits{})), to_json(random_case(p, 3, i))) << p << " " << i;

  DrawLimits megatron;  // what the Megatron adapter declares on a GPU with a 4096-token cap
  megatron.layouts = {Layout::zigzag};
  megatron.pad_rows = {PadRows::attend};
  megatron.max_tokens = 4096;
  DrawLimits no_cp;
  no_cp.max_cp = 1;
  no_cp.max_tokens = 300;
  std::map<std::string, int> production_heads;
  const Limits saved = limits();
  limits().max_bytes = uint64_t{64} << 30;  // production cases are sized for the H200 host
  for (auto& p : profiles())
    for (int64_t i = 0; i < (p == "production" ? 24 : 80); ++i) {
      for (const DrawLimits* l : {&megatron, &no_cp}) {
        const Case c = random_case(p, 11, i, *l);
        ASSERT_EQ(outside(c, *l), "") << p << " " << i << " " << describe(c);
        EXPECT_NE(c.note.find("limits=("), std::string::npos) << c.note;
        EXPECT_NO_THROW(case_from_json(to_json(c))) << describe(c);
        if (l == &megatron && p == "production") {
          // Production widths and heads stay; only the lengths shrink to the cap.
          EXPECT_EQ(c.problem.dims.C, 512);
          ++production_heads[std::to_string(c.problem.dims.H)];
          int64_t S = 0;
          for (int64_t len : c.problem.seqlens) S += len;
          EXPECT_GE(S, 1024) << describe(c);
        }
      }
    }
  limits() = saved;
  EXPECT_EQ(production_heads.size(), 2u);  // both models drawn within the cap
  EXPECT_EQ(outside(random_case("smoke", 1, 0), DrawLimits{}), "");
  DrawLimits empty;
  empty.layouts.clear();
  EXPECT_THROW(random_case("smoke", 1, 0, empty), InvalidInput);
}

}  // namespace generate_test
}  // namespace
}  // namespace dsa
