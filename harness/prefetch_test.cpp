// CasePrefetch (harness/prefetch.hpp): a case prepared ahead is the case prepare_case makes, bit
// for bit; a case that was not started is prepared on the spot without dropping what is in flight;
// a bad case's error reaches the caller of take.
#include "harness/prefetch.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "core/errors.hpp"
#include "harness/generate.hpp"
#include "harness/run_case.hpp"

namespace dsa {
namespace {

Case seeded(int64_t index) { return random_case("smoke", 17, index); }

void expect_same_inputs(const PreparedCase& a, const PreparedCase& b) {
  std::vector<const TensorD*> bs;
  b.inputs.for_each([&](const std::string&, const TensorD& t) { bs.push_back(&t); });
  size_t k = 0;
  a.inputs.for_each([&](const std::string& name, const TensorD& t) {
    ASSERT_LT(k, bs.size());
    EXPECT_EQ(t.shape, bs[k]->shape) << name;
    // Bit for bit: poisoned pad rows hold NaN.
    EXPECT_EQ(t.data.size(), bs[k]->data.size()) << name;
    if (t.data.size() == bs[k]->data.size())
      EXPECT_EQ(std::memcmp(t.data.data(), bs[k]->data.data(), t.data.size() * sizeof(double)), 0) << name;
    ++k;
  });
  EXPECT_EQ(a.layout.tp, b.layout.tp);
  EXPECT_EQ(a.injected.has_value(), b.injected.has_value());
  if (a.injected && b.injected) EXPECT_EQ(a.injected->data, b.injected->data);
}

TEST(CasePrefetch, PreparedAheadIsThePreparedCase) {
  CasePrefetch f;
  const Case a = seeded(1), b = seeded(2);
  f.start(a);
  f.start(b);
  double waited = -1;
  expect_same_inputs(f.take(a, &waited), prepare_case(a));
  EXPECT_GE(waited, 0);
  expect_same_inputs(f.take(b), prepare_case(b));
}

TEST(CasePrefetch, ACaseNotStartedIsPreparedAndKeepsTheOneInFlight) {
  CasePrefetch f;
  const Case a = seeded(3), b = seeded(4), other = seeded(5);
  f.start(a);
  expect_same_inputs(f.take(other), prepare_case(other));
  expect_same_inputs(f.take(a), prepare_case(a));
  // Taking a case drops what was started before it; b was never started: prepared on the spot.
  f.start(a);
  f.start(b);
  expect_same_inputs(f.take(b), prepare_case(b));
  expect_same_inputs(f.take(a), prepare_case(a));
}

TEST(CasePrefetch, AThirdStartDropsTheOldestWhichIsThenPreparedOnTheSpot) {
  CasePrefetch f;
  const Case a = seeded(6), b = seeded(7), c = seeded(8);
  f.start(a);
  f.start(b);
  f.start(c);
  expect_same_inputs(f.take(a), prepare_case(a));
  expect_same_inputs(f.take(c), prepare_case(c));
}

TEST(CasePrefetch, AnInvalidCaseThrowsFromTake) {
  CasePrefetch f;
  Case bad = seeded(9);
  bad.problem.topk = 0;
  f.start(bad);
  EXPECT_THROW(f.take(bad), InvalidInput);
  // The prefetch is usable after it.
  const Case a = seeded(10);
  f.start(a);
  expect_same_inputs(f.take(a), prepare_case(a));
}

}  // namespace
}  // namespace dsa
