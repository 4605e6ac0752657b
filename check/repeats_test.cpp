// --repeat (check/repeats.hpp): later runs of a backend held against the first. A tensor declared
// deterministic that changes one bit fails; an undeclared one may move within its tolerance and
// fails beyond it; the primary failure and the verdict follow; a run that drops a tensor fails.
#include "check/repeats.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "check/prepared_testing.hpp"
#include "reference/core.hpp"

namespace dsa {
namespace {
namespace repeats_test {  // its own names in a unity build (README "Layout of the source")

PreparedCase small_case() { return test::small_case({7, 6}, 4, 3); }

struct Judged {
  PreparedCase c = small_case();
  Result first;
  CaseVerdict v;
  Judged() {
    RunOptions opt;
    opt.precision = Precision::bf16;
    first = run_core(c.problem, c.inputs, opt);
    auto oracle = make_cpu_oracle();
    v = judge(c, first, *oracle);
  }
};

const TensorCheck& check_of(const CaseVerdict& v, const std::string& t) {
  for (auto& ch : v.checks)
    if (ch.tensor == t) return ch;
  throw std::runtime_error("no check of " + t);
}

std::vector<std::string> all_but(const std::string& t) {
  std::vector<std::string> out;
  for (const TensorSpec* s : result_specs())
    if (s->name != t) out.emplace_back(s->name);
  return out;
}

TEST(Repeats, IdenticalRunsPassWithZeroSpread) {
  Judged j;
  ASSERT_EQ(j.v.verdict, Verdict::pass) << j.v.message;
  check_repeat(j.v, j.first, j.first, all_but(""));
  check_repeat(j.v, j.first, j.first, all_but(""));
  EXPECT_EQ(j.v.verdict, Verdict::pass) << j.v.message;
  const TensorCheck& o = check_of(j.v, "O");
  ASSERT_TRUE(o.repeat);
  EXPECT_EQ(o.repeat->runs, 3);
  EXPECT_TRUE(o.repeat->deterministic);
  EXPECT_EQ(o.repeat->differing, 0);
  EXPECT_EQ(o.repeat->spread, 0);
}

TEST(Repeats, OneFlippedBitOfADeterministicTensorFails) {
  Judged j;
  Result again = j.first;
  uint64_t bits;
  std::memcpy(&bits, &again.lse.data[5], 8);
  bits ^= 1;  // one ulp of fp64: far below any tolerance, but not the same bits
  std::memcpy(&again.lse.data[5], &bits, 8);
  check_repeat(j.v, j.first, again, all_but(""));
  EXPECT_EQ(j.v.verdict, Verdict::fail);
  EXPECT_EQ(j.v.tensor, "lse");
  EXPECT_EQ(j.v.failure, Failure::nondeterministic);
  EXPECT_NE(j.v.message.find("declared deterministic"), std::string::npos) << j.v.message;
  EXPECT_EQ(check_of(j.v, "lse").repeat->differing, 1);
  EXPECT_FALSE(check_of(j.v, "O").failed());
}

TEST(Repeats, AnUndeclaredTensorMayMoveWithinItsTolerance) {
  Judged j;
  const TensorCheck dc = check_of(j.v, "dc");
  const double tolerance = dc.alpha * dc.e_l + dc.floor;
  ASSERT_GT(tolerance, 0);
  Result small = j.first, big = j.first;
  small.dc.data[2] += 0.5 * tolerance;
  check_repeat(j.v, j.first, small, all_but("dc"));
  EXPECT_EQ(j.v.verdict, Verdict::pass) << j.v.message;
  EXPECT_NEAR(check_of(j.v, "dc").repeat->spread_ratio, 0.5, 1e-6);
  EXPECT_FALSE(check_of(j.v, "dc").repeat->deterministic);
  big.dc.data[2] += 1.5 * tolerance;
  check_repeat(j.v, j.first, big, all_but("dc"));
  EXPECT_EQ(j.v.verdict, Verdict::fail);
  EXPECT_EQ(j.v.tensor, "dc");
  EXPECT_EQ(j.v.failure, Failure::nondeterministic);
  EXPECT_NE(j.v.message.find("exceeds the tolerance"), std::string::npos) << j.v.message;
  EXPECT_EQ(check_of(j.v, "dc").repeat->runs, 3);
}

TEST(Repeats, ARunThatDropsATensorFails) {
  Judged j;
  Result again = j.first;
  again.dk_I = TensorD();
  check_repeat(j.v, j.first, again, {});
  EXPECT_EQ(j.v.verdict, Verdict::fail);
  EXPECT_EQ(j.v.tensor, "dk_I");
  EXPECT_NE(j.v.message.find("left the tensor out"), std::string::npos) << j.v.message;
}

}  // namespace repeats_test
}  // namespace
}  // namespace dsa
