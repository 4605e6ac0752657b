// What bf16_normal (harness/normal_bf16.hpp) and its device fill (harness/gpu/normal_fill.cu)
// share: Box-Muller with its cos by a short series, and the test that decides whether a value
// computed so rounds to bf16 as libm's would. C++17, host and device: nvcc compiles it too.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "harness/philox.hpp"

namespace dsa::philox::series {

// cos x for x in [0, 2π]: x − k·π/2 (π/2 in two parts, the first of 33 bits so k·it is exact) into
// [−π/4, π/4], then cos or sin of that by Taylor series to r^16 / r^17: within 10^-15 of libm.
DSA_HOST_DEVICE inline double cos_0_2pi(double x) {
  constexpr double kPio2Hi = 1.57079632673412561417e+00, kPio2Lo = 6.07710050650619224932e-11;
  constexpr double kRound = 6755399441055744.0;  // 1.5·2^52: adding and taking it off rounds to an integer
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

DSA_HOST_DEVICE inline double double_of_bits(uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
#endif
}

DSA_HOST_DEVICE inline uint64_t bits_of_double(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
#endif
}

// Whether every value within `bound` of the double `bits` rounds to bf16 as it does, the value in
// bf16's normal range: no bf16 rounding boundary (a mantissa whose 45 dropped bits are 10…0) is
// that near. Rounding is monotonic, so only the boundary of the value's own binade can be; outside
// the normal range (0 included, where the sign of a zero matters) the answer is no.
DSA_HOST_DEVICE inline bool bf16_rounding_is_safe(uint64_t bits, double bound) {
  const int64_t biased = static_cast<int64_t>((bits >> 52) & 0x7FF);
  if (biased < 1023 - 126 || biased > 1023 + 127) return false;
  const int64_t dropped = static_cast<int64_t>(bits & ((uint64_t{1} << 45) - 1)) - (int64_t{1} << 44);
  const double ulp = double_of_bits(static_cast<uint64_t>(biased - 52) << 52);  // 2^(exponent − 52)
  return static_cast<double>(dropped < 0 ? -dropped : dropped) * ulp > bound;
}

// Round-to-nearest-even of a double in bf16's normal range to the bf16 bit pattern.
DSA_HOST_DEVICE inline uint16_t bf16_bits_of_normal(uint64_t bits) {
  const uint64_t lsb = (bits >> 45) & 1;
  bits += ((uint64_t{1} << 44) - 1) + lsb;  // carries into the exponent where it must
  // sign, 8-bit exponent (rebiased from 11 bits), 7 mantissa bits
  const uint64_t sign = bits >> 63, exp11 = (bits >> 52) & 0x7FF, mant7 = (bits >> 45) & 0x7F;
  return static_cast<uint16_t>((sign << 15) | ((exp11 - 1023 + 127) << 7) | mant7);
}

// Stream::normal of the Philox block b times stddev, its cos by the series above (its log is
// libm's on the host, libdevice's on the device: within 1 ulp).
DSA_HOST_DEVICE inline double normal_times(const Block& b, double stddev) {
  const double u1 = Stream::unit(b[0], b[1]), u2 = Stream::unit(b[2], b[3]);
  return sqrt(-2.0 * log(u1)) * cos_0_2pi(6.283185307179586 * u2) * stddev;
}

// Whether y = normal_times(b, stddev) rounds to bf16 as round_bf16(Stream::normal · stddev) does:
// the series' error is below 10^-15 (|z| ≤ 8.6), the bound 10^-12 of the scale.
DSA_HOST_DEVICE inline bool rounds_as_libm(double y, double stddev) {
  return bf16_rounding_is_safe(bits_of_double(y), 1e-12 * (fabs(stddev) + fabs(y)));
}

}  // namespace dsa::philox::series
