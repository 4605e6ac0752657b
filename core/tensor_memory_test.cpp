#include "core/tensor_memory.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "core/tensor.hpp"

namespace dsa {
namespace {

// DSA_TENSOR_MEMORY=plain turns the cache and the huge pages off: nothing of theirs to test.
#define SKIP_IF_PLAIN() \
  if (tensor_memory_plain()) GTEST_SKIP() << "DSA_TENSOR_MEMORY=plain: large blocks come from operator new"

constexpr int64_t kLarge = int64_t(kHugeBlockBytes / sizeof(double)) * 2;  // 32 MiB of doubles

TEST(TensorMemory, LargeBlocksAreHugePageAligned) {
  SKIP_IF_PLAIN();
  TensorD t({kLarge});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data.data()) % (uintptr_t(2) << 20), 0u);
}

TEST(TensorMemory, AFreedLargeBlockServesTheNextTensorOfAboutItsSizeFilled) {
  SKIP_IF_PLAIN();
  const double* first;
  {
    TensorD a({kLarge}, 7.0);
    first = a.data.data();
  }
  const size_t kept = tensor_blocks_kept();
  EXPECT_GE(kept, size_t(kLarge) * sizeof(double));
  TensorD b({kLarge - 1000});  // a little smaller: the same block, filled anew
  EXPECT_EQ(b.data.data(), first);
  EXPECT_EQ(tensor_blocks_kept(), kept - size_t(kLarge) * sizeof(double));
  for (int64_t i = 0; i < b.size(); i += 4099) ASSERT_EQ(b.data[i], 0.0) << i;
}

TEST(TensorMemory, AKeptBlockFarLargerThanTheRequestIsNotHandedOut) {
  SKIP_IF_PLAIN();
  const double* big;
  {
    TensorD a({kLarge * 4});
    big = a.data.data();
  }
  TensorD small({kLarge});
  EXPECT_NE(small.data.data(), big);
  TensorD again({kLarge * 4});  // the kept one fits this
  EXPECT_EQ(again.data.data(), big);
}

TEST(TensorMemory, SmallTensorsAndCopiesBehaveAsVectors) {
  TensorD s({3, 2}, 1.5);
  TensorD copy = s;
  copy.data[0] = -1;
  EXPECT_EQ(s.data[0], 1.5);
  TensorD big({kLarge}, 2.0);
  TensorD big_copy = big;
  EXPECT_NE(big_copy.data.data(), big.data.data());
  EXPECT_EQ(big_copy.data[kLarge - 1], 2.0);
}

// kB of transparent huge pages backing the mapping that holds p (/proc/self/smaps), or −1 when
// the kernel has no THP at all (mode "never", or no such file: not Linux).
long huge_kb_around(const void* p) {
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string m((std::istreambuf_iterator<char>(mode)), std::istreambuf_iterator<char>());
  if (m.empty() || m.find("[never]") != std::string::npos) return -1;
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::stol(line.substr(14));
  }
  return 0;
}

// resize and the size constructor leave a TensorData's numbers unset (tensor_memory.hpp), so a
// kept block comes back with the last case's values in it: Tensor(shape) and resize(n, 0) must
// still be zeros there, and an Uninitialized tensor must have its shape's size.
TEST(TensorMemory, AReusedBlockIsZeroWhereZerosWereAskedFor) {
  const int64_t n = kLarge + 1000;
  for (int round = 0; round < 3; ++round) {
    { TensorD dirty({n}, 7.0); }
    const TensorD zero({n});
    ASSERT_EQ(zero.size(), n);
    EXPECT_TRUE(std::all_of(zero.data.begin(), zero.data.end(), [](double x) { return x == 0.0; })) << round;
    { TensorD dirty({n}, 7.0); }
    TensorData<double> v;
    v.resize(static_cast<size_t>(n), 0.0);
    EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x == 0.0; })) << round;
  }
  const TensorD unset({3, n / 3}, Uninitialized{});
  EXPECT_EQ(unset.size(), 3 * (n / 3));
  EXPECT_EQ(unset.shape, (Shape{3, n / 3}));
}

TEST(TensorMemory, ALargeTensorIsBackedByHugePages) {
  SKIP_IF_PLAIN();
  TensorD t({kLarge * 2}, 1.0);
  const long kb = huge_kb_around(t.data.data() + t.size() / 2);
  if (kb < 0) GTEST_SKIP() << "transparent huge pages are off on this machine";
  EXPECT_GT(kb, 0);
}

}  // namespace
}  // namespace dsa
