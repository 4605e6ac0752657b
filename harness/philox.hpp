// Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11). Pure integer arithmetic
// plus one Box-Muller step, so every value is a pure function of (key, counter) on every
// platform and build. The generator rounds these once to bf16 (core/bf16.hpp).
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string_view>

// What the device's draws (harness/gpu/normal_fill.cu) share with the host's: nvcc compiles this too.
#if defined(__CUDACC__)
#define DSA_HOST_DEVICE __host__ __device__
#else
#define DSA_HOST_DEVICE
#endif

namespace dsa::philox {

using Block = std::array<uint32_t, 4>;
using Key = std::array<uint32_t, 2>;

// Philox4x32 with 10 rounds; the key is bumped by the Weyl constants between rounds.
DSA_HOST_DEVICE inline Block philox4x32_10(Block ctr, Key key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kW0;
      key[1] += kW1;
    }
    const uint64_t p0 = uint64_t{kM0} * ctr[0], p1 = uint64_t{kM1} * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1], uint32_t(p0)};
  }
  return ctr;
}

// FNV-1a, 64 bits: the stable hash of a tensor name.
inline uint64_t name_hash(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

// The stream of one named tensor under one seed: key = the seed's 64 bits, counter = (element
// index, name hash). Element i's four words never depend on any other element.
struct Stream {
  Key key;
  uint64_t name;
  Stream(uint64_t seed, std::string_view tensor_name)
      : key{uint32_t(seed), uint32_t(seed >> 32)}, name(name_hash(tensor_name)) {}

  DSA_HOST_DEVICE Block block(uint64_t i) const {
    return philox4x32_10({uint32_t(i), uint32_t(i >> 32), uint32_t(name), uint32_t(name >> 32)}, key);
  }
  // 53-bit uniforms in (0, 1] from two words (never 0, so log() is finite).
  DSA_HOST_DEVICE static double unit(uint32_t hi, uint32_t lo) {
    const uint64_t m = (uint64_t{hi} << 21) ^ (lo >> 11);  // 53 bits
    return (double(m & ((1ull << 53) - 1)) + 1.0) * 0x1p-53;
  }
  double uniform(uint64_t i) const {  // (0, 1]
    const Block b = block(i);
    return unit(b[0], b[1]);
  }
  // Standard normal by Box-Muller from the element's two uniforms.
  double normal(uint64_t i) const {
    const Block b = block(i);
    const double u1 = unit(b[0], b[1]), u2 = unit(b[2], b[3]);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // An integer in [0, n), n >= 1 (the bias of the modulo is below 2^-32 for our n).
  uint64_t below(uint64_t i, uint64_t n) const {
    const Block b = block(i);
    return ((uint64_t{b[2]} << 32) | b[3]) % n;
  }
};

}  // namespace dsa::philox
