// The generator's normal draws on a CUDA device: at production shapes a case draws 2·10^8 of them,
// several CPU-seconds even through bf16_normal (harness/normal_bf16.hpp), which made generation the
// longest stage of a GPU-judged case. The device computes each value as bf16_normal does (Philox,
// libdevice's log, the same cos series, the same rounding-safety test) and hands back its bf16 bits,
// or kLibmDecides where the host must compute it through libm: the values are bit for bit the host
// generator's, whichever side computes them.
#pragma once

#include <cstdint>

#include "harness/philox.hpp"

namespace dsa {

inline constexpr uint16_t kLibmDecides = 0xFFFF;  // a NaN pattern: never a drawn value

// bits[i] = the bf16 bits of round_bf16(s.normal(i) · stddev), or kLibmDecides, for i < n, on the
// calling thread's current device. False (bits untouched) when the build has no CUDA, no device is
// present, device generation is off, or a CUDA call failed (said once on stderr): the caller then
// draws on the host, to the same values.
bool device_bf16_normal_bits(const philox::Stream& s, double stddev, uint16_t* bits, int64_t n);

// Whether generation may use a device: on unless $DSA_GENERATE is "host" (read once); tests switch
// it to compare both sides.
bool device_generation_allowed();
void allow_device_generation(bool on);

}  // namespace dsa
