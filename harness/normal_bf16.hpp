// round_bf16(s.normal(i) · stddev), bit for bit, about 30 % faster: the generator's inner loop (a
// DeepSeek-V3.2 case at S 4096 draws 2·10^8 of them, about 8 s of CPU through libm: the largest host
// cost of a GPU-judged case, and most of it libm's cos).
//
// Box-Muller's cos is evaluated here by a short series whose error is far below the bound used
// next (|Δz| ≤ 10^-15 for |z| ≤ 8.6 against 10^-12); the product y = z·stddev is then rounded to
// bf16 only where no bf16 rounding boundary lies within that bound of it, so the libm value
// rounds the same way. Elsewhere (about one value in 10^9, and outside bf16's normal range, 0
// included, where the sign of a zero matters) the value is computed as Stream::normal does. So
// the result never depends on the series, only the speed does (harness/normal_bf16_test.cpp).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "core/bf16.hpp"
#include "harness/philox.hpp"

namespace dsa::philox {

namespace series {

// cos x for x in [0, 2π]: x − k·π/2 (π/2 in two parts, the first of 33 bits so k·it is exact) into
// [−π/4, π/4], then cos or sin of that by Taylor series to r^16 / r^17.
inline double cos_0_2pi(double x) {
  constexpr double kPio2Hi = 1.57079632673412561417e+00, kPio2Lo = 6.07710050650619224932e-11;
  constexpr double kRound = 0x1.8p52;  // adding and taking it off rounds to an integer (|x·2/π| ≤ 4)
  const double k = (x * 0.63661977236758134308 + kRound) - kRound;
  const double r = (x - k * kPio2Hi) - k * kPio2Lo, r2 = r * r;
  // Both series, then the quadrant's pick by index: a branch on the quadrant mispredicts half the time.
  const double c = ((((((((1.0 / 20922789888000.0) * r2 - 1.0 / 87178291200.0) * r2 + 1.0 / 479001600.0) * r2 -
                        1.0 / 3628800.0) * r2 + 1.0 / 40320.0) * r2 - 1.0 / 720.0) * r2 + 1.0 / 24.0) * r2 - 0.5) * r2 +
                   1.0;  // cos r, to r^16/16!
  const double sn = r * (((((((((1.0 / 355687428096000.0) * r2 - 1.0 / 1307674368000.0) * r2 + 1.0 / 6227020800.0) * r2 -
                              1.0 / 39916800.0) * r2 + 1.0 / 362880.0) * r2 - 1.0 / 5040.0) * r2 + 1.0 / 120.0) * r2 -
                           1.0 / 6.0) * r2 + 1.0);  // sin r, to r^17/17!
  const double pick[4] = {c, -sn, -c, sn};
  return pick[static_cast<int>(k) & 3];
}

}  // namespace series

inline double bf16_normal(const Stream& s, uint64_t i, double stddev) {
  const Block b = s.block(i);
  const double u1 = Stream::unit(b[0], b[1]), u2 = Stream::unit(b[2], b[3]);
  const double y = std::sqrt(-2.0 * std::log(u1)) * series::cos_0_2pi(6.283185307179586 * u2) * stddev;
  // y rounds as libm's value does where no bf16 rounding boundary (a mantissa whose 45 dropped bits
  // are 10…0) lies within `bound` of it: its distance to the one in its binade, in ulps, against
  // the bound in ulps. Outside bf16's normal range (and at 0) libm decides.
  const uint64_t bits = std::bit_cast<uint64_t>(y);
  const int biased = static_cast<int>((bits >> 52) & 0x7FF);
  if (biased >= 1023 - 126 && biased <= 1023 + 127) {
    const int64_t dropped = static_cast<int64_t>(bits & ((uint64_t{1} << 45) - 1)) - (int64_t{1} << 44);
    const double per_ulp = std::bit_cast<double>(uint64_t(2 * 1023 + 52 - biased) << 52);  // 1 / ulp(y)
    const double bound = 1e-12 * (std::fabs(stddev) + std::fabs(y));
    if (double(dropped < 0 ? -dropped : dropped) > bound * per_ulp) return round_bf16(y);
  }
  return round_bf16(s.normal(i) * stddev);
}

}  // namespace dsa::philox
