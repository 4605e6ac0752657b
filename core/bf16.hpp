// The bf16 rounding of SPEC.md §8, once for the whole project: round to nearest, ties to even,
// on the bits of the value itself (a double is never rounded through float first). NaN stays NaN
// (sign kept, quiet), ±inf stays ±inf, and a finite value past the largest bf16 becomes ±inf.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace dsa {

// The nearest bf16 value to x, held in a double.
inline double round_bf16(double x) {
  if (!std::isfinite(x) || x == 0) return x;
  if (std::fabs(x) < 0x1p-126)  // bf16 subnormals: a multiple of 2^-133, exact scalings
    return std::nearbyint(x * 0x1p133) * 0x1p-133;
  uint64_t b = std::bit_cast<uint64_t>(x);
  const uint64_t lsb = (b >> 45) & 1;  // 52 - 7 dropped mantissa bits
  b += ((uint64_t{1} << 44) - 1) + lsb;
  b &= ~((uint64_t{1} << 45) - 1);
  const double r = std::bit_cast<double>(b);
  return std::fabs(r) > 0x1.FEp127 ? std::copysign(INFINITY, x) : r;
}

// The bits of x rounded to bf16: what device buffers hold.
inline uint16_t bf16_bits(float x) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((b >> 16) | 0x0040u);  // quiet, sign kept
  return static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);  // carries into the exponent (and to inf)
}
// The value of bf16 bits.
inline float bf16_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

inline float round_bf16(float x) { return bf16_float(bf16_bits(x)); }

}  // namespace dsa
