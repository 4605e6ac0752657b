// The device's normal draws (harness/device_normals.hpp) against the host generator's, bit for bit:
// value by value, and whole inputs of a case generated with and without the device.
#include "harness/device_normals.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/bf16.hpp"
#include "harness/backend.hpp"
#include "harness/generate.hpp"
#include "harness/normal_bf16.hpp"

namespace dsa {
namespace {

#define SKIP_WITHOUT_DEVICE() \
  if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device: the generator draws on the host only"

// Restores device generation when a test that switched it ends.
struct DeviceGeneration {
  bool was = device_generation_allowed();
  ~DeviceGeneration() { allow_device_generation(was); }
};

TEST(DeviceNormals, BitsAreTheHostDraws) {
  SKIP_WITHOUT_DEVICE();
  const DeviceGeneration keep;
  allow_device_generation(true);
  int64_t libm = 0, total = 0;
  for (const double stddev : {1.0, 1.0 / std::sqrt(128.0), 16.0, 1e-30, 1e-39, 0.0})
    for (const char* name : {"q_nope", "dO"}) {
      const philox::Stream s(0x8000000000000061ull, name);
      const int64_t n = (int64_t(1) << 20) + 37;
      std::vector<uint16_t> bits(n);
      ASSERT_TRUE(device_bf16_normal_bits(s, stddev, bits.data(), n));
      for (int64_t i = 0; i < n; ++i) {
        const double host = round_bf16(s.normal(i) * stddev);
        if (bits[i] == kLibmDecides) {
          ++libm;
          continue;
        }
        const double dev = bf16_float(bits[i]);
        ASSERT_EQ(std::memcmp(&dev, &host, sizeof dev), 0) << name << " stddev " << stddev << " element " << i;
      }
      total += n;
    }
  // Where libm decides: 0 and values below bf16's normal range (stddev 0 and 1e-39: every one),
  // otherwise about one in 10^9.
  EXPECT_LE(libm, 2 * 2 * ((int64_t(1) << 20) + 37) + 10);
  EXPECT_EQ(total, 12 * ((int64_t(1) << 20) + 37));
}

TEST(DeviceNormals, CaseInputsEqualTheHostGenerators) {
  SKIP_WITHOUT_DEVICE();
  const DeviceGeneration keep;
  // Nightly cases whose weights are drawn on the device (production widths at 8+ heads).
  std::vector<Case> cases;
  for (int64_t i = 0; cases.size() < 3 && i < 2000; ++i) {
    Case c = random_case("nightly", 11, i);
    const Dims& d = c.problem.dims;
    if (d.H * d.Dn * d.C >= (int64_t(1) << 20)) cases.push_back(std::move(c));
  }
  ASSERT_EQ(cases.size(), 3u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    allow_device_generation(true);
    const Inputs dev = generate_inputs(c);
    allow_device_generation(false);
    const Inputs host = generate_inputs(c);
    int64_t large = 0;
    dev.for_each([&](const std::string& n, const TensorD& t) {
      const TensorD* h = nullptr;
      host.for_each([&](const std::string& m, const TensorD& u) { if (m == n) h = &u; });
      ASSERT_NE(h, nullptr) << n;
      ASSERT_EQ(t.shape, h->shape) << n;
      ASSERT_EQ(std::memcmp(t.data.data(), h->data.data(), t.data.size() * sizeof(double)), 0) << "case " << i << " " << n;
      large += t.size() >= (int64_t(1) << 20);
    });
    EXPECT_GT(large, 0) << "case " << i << " has no tensor large enough to be drawn on the device";
  }
}

}  // namespace
}  // namespace dsa
