// Held (reference/rank.hpp): the reference's matrices in tensor memory. Every block is 64-byte
// aligned, a large one comes back for the next matrix of its size (the next run maps no fresh
// pages), a move hands the block over, and a run on reused blocks computes bit for bit what the
// first run did, in both precision policies.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "core/tensor_memory.hpp"
#include "reference/core.hpp"
#include "reference/rank.hpp"
#include "reference/test_util.hpp"

namespace dsa {
namespace {

using detail::Held;

bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

TEST(Held, EveryBlockIs64ByteAligned) {
  for (int64_t cols : {1, 3, 17, 1000}) {
    Held<double> d(5, cols);
    Held<float> f(7, cols);
    EXPECT_TRUE(aligned64(d.data())) << cols;
    EXPECT_TRUE(aligned64(f.data())) << cols;
  }
  Held<double> large(2048, 2048);  // 32 MiB: a tensor-memory block
  EXPECT_TRUE(aligned64(large.data()));
}

TEST(Held, ALargeBlockIsReusedByTheNextMatrixOfItsSize) {
  if (tensor_memory_plain()) GTEST_SKIP() << "DSA_TENSOR_MEMORY=plain: no block is kept for reuse";
  const double* first = nullptr;
  {
    Held<double> m(2048, 2048);
    m.setConstant(1.0);
    first = m.data();
  }
  EXPECT_GE(tensor_blocks_kept(), size_t(32) << 20);
  const Held<double> again(2048, 2048);
  EXPECT_EQ(again.data(), first);
}

TEST(Held, MoveHandsTheBlockOverAndResizeKeepsASameSizedOne) {
  Held<double> a(3, 4);
  a.setConstant(2.5);
  const double* block = a.data();
  Held<double> b(std::move(a));
  EXPECT_EQ(b.data(), block);
  EXPECT_EQ(b.rows(), 3);
  EXPECT_EQ(b(2, 3), 2.5);
  EXPECT_EQ(a.size(), 0);
  EXPECT_EQ(a.data(), nullptr);
  Held<double> c(1, 1);
  c = std::move(b);
  EXPECT_EQ(c.data(), block);
  EXPECT_EQ(c.cols(), 4);
  c.resize(4, 3);  // the same bytes: the same block, viewed at the new shape
  EXPECT_EQ(c.data(), block);
  EXPECT_EQ(c.rows(), 4);
  EXPECT_EQ(c.cols(), 3);
}

// Q~ is [Tp, H·(C+R)] = 700 × 32·128 doubles (23 MB) and O_lat 20 MB: tensor-memory blocks, which
// the second run gets back from the first.
TEST(Held, ARunOnReusedBlocksEqualsTheFirstBitForBit) {
  Dims d;
  d.H = 32, d.Dn = 16, d.R = 16, d.C = 112, d.Dv = 16, d.HI = 4, d.DI = 16;
  const Problem p = test::small_problem({700}, d, 128);
  const StreamLayout L = test::layout_of(p);
  const Inputs in = test::random_inputs(d, L.tp, 77);
  for (Precision precision : {Precision::exact, Precision::bf16}) {
    RunOptions opt;
    opt.precision = precision;
    const Result first = run_core(p, in, opt);
    if (!tensor_memory_plain()) EXPECT_GT(tensor_blocks_kept(), size_t(0));
    const Result second = run_core(p, in, opt);
    EXPECT_GT(test::max_abs(first.dc), 0.0);
    EXPECT_TRUE(test::results_close(second, first, 0.0)) << name(precision);
  }
}

}  // namespace
}  // namespace dsa
