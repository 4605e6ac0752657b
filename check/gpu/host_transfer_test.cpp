// Host → device uploads (host_transfer.hpp): tensors of bf16 numbers go up as 2-byte patterns and are
// widened on the device; any other tensor (a value with more mantissa, a NaN whose payload marks an
// unwritten element) must go up exactly as it is. Without a CUDA device it skips.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "check/gpu/cuda_util.hpp"
#include "check/gpu/gpu_oracle.hpp"
#include "check/gpu/host_transfer.hpp"
#include "core/bf16.hpp"
#include "core/result.hpp"

namespace dsa::gpu {
namespace {

std::vector<double> bf16_values(size_t n) {
  std::mt19937 gen(7);
  std::normal_distribution<double> nd(0.0, 3.0);
  std::vector<double> v(n);
  for (double& x : v) x = round_bf16(nd(gen));
  // The edges: signed zeros, infinities, the largest and a subnormal bf16 number.
  v[0] = -0.0, v[1] = std::numeric_limits<double>::infinity(), v[2] = -v[1];
  v[3] = std::bit_cast<float>(0x7F7F0000u), v[4] = std::bit_cast<float>(0x00010000u);
  return v;
}

template <class R>
std::vector<R> round_trip(const std::vector<double>& h) {
  DeviceArray<R> d(h.size());
  to_device<R>(h.data(), d.get(), h.size());
  return d.download();
}

template <class R>
void expect_bits(const std::vector<R>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const R w = static_cast<R>(want[i]);
    if (std::bit_cast<std::conditional_t<sizeof(R) == 8, uint64_t, uint32_t>>(got[i]) !=
        std::bit_cast<std::conditional_t<sizeof(R) == 8, uint64_t, uint32_t>>(w)) {
      ADD_FAILURE() << "element " << i << ": sent " << want[i] << ", the device holds " << got[i];
      return;
    }
  }
}

TEST(HostTransfer, Bf16NumbersAndEveryOtherValueArriveBitForBit) {
  if (!gpu_oracle_available()) GTEST_SKIP() << "no CUDA device: the upload needs one";
  const size_t n = 300000;  // above the compact path's threshold
  const std::vector<double> bf = bf16_values(n);
  expect_bits(round_trip<double>(bf), bf);
  expect_bits(round_trip<float>(bf), bf);

  std::vector<double> finer = bf;  // one value with fp64 mantissa bits, at the end
  finer[n - 1] = 1.0 + std::ldexp(1.0, -40);
  expect_bits(round_trip<double>(finer), finer);
  std::vector<double> unwritten = bf;  // core/result.hpp's marker NaN in the middle
  unwritten[n / 2] = unwritten_value();
  const std::vector<double> back = round_trip<double>(unwritten);
  ASSERT_EQ(back.size(), n);
  EXPECT_TRUE(is_unwritten(back[n / 2])) << "the unwritten marker lost its payload on the way up";
  expect_bits(back, unwritten);
}

}  // namespace
}  // namespace dsa::gpu
