// bf16_normal must return exactly what the generator's libm path returns (round_bf16 of
// Stream::normal · stddev), bit for bit, whatever the seed, tensor, element or scale; and its cos
// series must be accurate enough that the fast path decides nearly every value.
#include "harness/normal_bf16.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace dsa::philox {
namespace {

TEST(NormalBf16, EqualsTheLibmPathBitForBit) {
  const double scales[] = {1.0, 1.0 / std::sqrt(128.0), 16.0, 1000.0, 1e-30, 1e-39, 0.0, -0.5};
  const uint64_t firsts[] = {0, (uint64_t{1} << 32) - 1000, (uint64_t{1} << 53) + 7};
  int64_t compared = 0;
  for (uint64_t seed : {uint64_t{0}, uint64_t{97}, uint64_t{0x8000000000000005}})
    for (const char* name : {"q_nope", "W_UK", "dO"}) {
      const Stream s(seed, name);
      for (uint64_t first : firsts)
        for (uint64_t i = first; i < first + 40000; ++i) {
          const double scale = scales[i % std::size(scales)];
          const double fast = bf16_normal(s, i, scale), libm = round_bf16(s.normal(i) * scale);
          ASSERT_EQ(std::memcmp(&fast, &libm, sizeof(double)), 0)
              << "seed " << seed << " " << name << " element " << i << " scale " << scale << ": " << fast << " vs " << libm;
          ++compared;
        }
    }
  EXPECT_EQ(compared, 3 * 3 * 3 * 40000);
}

// The series against libm's cos over [0, 2π] (the quadrant ends included): within 10^-15, a
// thousandth of the bound under which bf16_normal trusts it.
TEST(NormalBf16, CosSeriesIsWithin1e15OfLibm) {
  double worst = 0;
  const int n = 1 << 20;
  for (int j = 0; j <= n; ++j) {
    const double x = 6.283185307179586 * (double(j) / n);
    worst = std::max(worst, std::fabs(series::cos_0_2pi(x) - std::cos(x)));
  }
  for (double x : {0.0, 0.7853981633974483, 1.5707963267948966, 3.141592653589793, 4.71238898038469, 6.283185307179586})
    worst = std::max(worst, std::fabs(series::cos_0_2pi(x) - std::cos(x)));
  EXPECT_LT(worst, 1e-15);
}

}  // namespace
}  // namespace dsa::philox
