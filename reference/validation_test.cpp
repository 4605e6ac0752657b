// Bad input (issue 2 item 6): each rule throws dsa::InvalidInput whose field names the culprit and
// whose rule text says what is wrong.
#include <gtest/gtest.h>

#include <functional>

#include "reference/core.hpp"
#include "core/errors.hpp"
#include "core/inputs.hpp"
#include "core/layout.hpp"
#include "core/problem.hpp"
#include "reference/test_util.hpp"

namespace dsa {
namespace {

// Runs f, expects InvalidInput naming `field`, with a non-empty rule.
::testing::AssertionResult rejects(const std::function<void()>& f, const std::string& field) {
  try {
    f();
  } catch (const InvalidInput& e) {
    if (e.field != field) return ::testing::AssertionFailure() << "field '" << e.field << "', expected '" << field << "'";
    if (e.rule.empty()) return ::testing::AssertionFailure() << "empty rule for " << field;
    if (std::string(e.what()).find(field) == std::string::npos)
      return ::testing::AssertionFailure() << "message '" << e.what() << "' does not name " << field;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw another exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "accepted bad input (expected InvalidInput on " << field << ")";
}

TEST(Validation, InconsistentShapesNameTheTensor) {
  const Dims d = test::tiny_dims();
  const int64_t tp = 6;
  Inputs good = zero_inputs(d, tp);
  EXPECT_NO_THROW(check_shapes(good, d, tp));
  good.for_each([&](const std::string& n, const TensorD&) {
    Inputs bad = zero_inputs(d, tp);
    bad.for_each([&](const std::string& m, TensorD& t) {
      if (m == n) {
        Shape s = t.shape;
        s.back() += 1;  // one column too many
        t = TensorD(s);
      }
    });
    EXPECT_TRUE(rejects([&] { check_shapes(bad, d, tp); }, n));
  });
  // Wrong row count (a tensor for another Tp) and wrong rank.
  Inputs rows = zero_inputs(d, tp);
  rows.k_I = TensorD({tp + 1, d.DI});
  EXPECT_TRUE(rejects([&] { check_shapes(rows, d, tp); }, "k_I"));
  Inputs rank = zero_inputs(d, tp);
  rank.q_nope = TensorD({tp, d.H * d.Dn});
  EXPECT_TRUE(rejects([&] { check_shapes(rank, d, tp); }, "q_nope"));
}

TEST(Validation, NegativeLengths) {
  CpSpec cp;
  EXPECT_TRUE(rejects([&] { make_layout({3, -1}, cp); }, "seqlens[1]"));
  Problem p = test::small_problem({4, -2});
  EXPECT_TRUE(rejects([&] { validate(p); }, "seqlens[1]"));
}

TEST(Validation, EmptyStream) {
  EXPECT_TRUE(rejects([&] { make_layout({}, CpSpec{}); }, "seqlens"));
  EXPECT_TRUE(rejects([&] { make_layout({0, 0}, CpSpec{}); }, "seqlens"));
}

TEST(Validation, TopkBelowOne) {
  for (int64_t k : {0, -3}) {
    Problem p = test::small_problem({5});
    p.topk = k;
    EXPECT_TRUE(rejects([&] { validate(p); }, "topk"));
  }
}

TEST(Validation, CpBelowOne) {
  for (int64_t c : {0, -1}) {
    CpSpec cp;
    cp.size = c;
    EXPECT_TRUE(rejects([&] { make_layout({5}, cp); }, "cp.size"));
    Problem p = test::small_problem({5});
    p.cp.size = c;
    EXPECT_TRUE(rejects([&] { validate(p); }, "cp.size"));
  }
}

TEST(Validation, PadMultipleMustBeAMultipleOf2CpUnderZigzag) {
  CpSpec cp;
  cp.size = 3, cp.layout = Layout::zigzag, cp.pad_multiple = 4;
  EXPECT_TRUE(rejects([&] { make_layout({5, 11}, cp); }, "cp.pad_multiple"));
  cp.pad_multiple = 12;
  EXPECT_NO_THROW(make_layout({5, 11}, cp));
  cp.pad_multiple = -2;
  EXPECT_TRUE(rejects([&] { make_layout({5, 11}, cp); }, "cp.pad_multiple"));
  // Contiguous takes any positive pad_multiple.
  cp.layout = Layout::contiguous, cp.pad_multiple = 5;
  EXPECT_NO_THROW(make_layout({5, 11}, cp));
}

TEST(Validation, UnknownNames) {
  EXPECT_TRUE(rejects([] { parse_layout("zig-zag"); }, "cp.layout"));
  EXPECT_TRUE(rejects([] { parse_layout("Zigzag", "--layout"); }, "--layout"));
  EXPECT_TRUE(rejects([] { parse_pad_rows("mask"); }, "pad_rows"));
  EXPECT_TRUE(rejects([] { parse_loss_mode("kl"); }, "loss.mode"));
  EXPECT_TRUE(rejects([] { parse_path("absorb"); }, "path"));
  EXPECT_TRUE(rejects([] { parse_precision("fp16"); }, "precision"));
  // The names round-trip.
  for (Layout v : {Layout::zigzag, Layout::contiguous}) EXPECT_EQ(parse_layout(name(v)), v);
  for (PadRows v : {PadRows::attend, PadRows::masked}) EXPECT_EQ(parse_pad_rows(name(v)), v);
  for (LossMode v : {LossMode::off, LossMode::sparse, LossMode::dense}) EXPECT_EQ(parse_loss_mode(name(v)), v);
  for (Path v : {Path::absorbed, Path::explicit_}) EXPECT_EQ(parse_path(name(v)), v);
  for (Precision v : {Precision::exact, Precision::bf16}) EXPECT_EQ(parse_precision(name(v)), v);
}

TEST(Validation, ZeroDims) {
  const std::pair<const char*, int64_t Dims::*> fields[] = {{"dims.H", &Dims::H},   {"dims.Dn", &Dims::Dn},
                                                            {"dims.R", &Dims::R},   {"dims.C", &Dims::C},
                                                            {"dims.Dv", &Dims::Dv}, {"dims.HI", &Dims::HI},
                                                            {"dims.DI", &Dims::DI}};
  for (auto& [field, member] : fields) {
    Problem p = test::small_problem({5});
    p.dims.*member = 0;
    EXPECT_TRUE(rejects([&] { validate(p); }, field));
  }
}

TEST(Validation, ScaleAndCoeff) {
  Problem p = test::small_problem({5});
  p.softmax_scale = 0;
  EXPECT_TRUE(rejects([&] { validate(p); }, "softmax_scale"));
  p = test::small_problem({5});
  p.coeff = -1;
  EXPECT_TRUE(rejects([&] { validate(p); }, "loss.coeff"));
  EXPECT_NO_THROW(validate(test::small_problem({5, 0, 1})));
}

// The core checks everything before it starts (a throwing rank would deadlock the others).
TEST(Validation, RunCoreRejectsBadInput) {
  Problem p = test::small_problem({5, 3});
  const StreamLayout L = test::layout_of(p);
  const Inputs good = test::random_inputs(p.dims, L.tp, 1);
  for (auto run : {&run_core, &run_core_sharded}) {
    Inputs bad = good;
    bad.w = TensorD({L.tp, p.dims.HI + 1});
    EXPECT_TRUE(rejects([&] { run(p, bad, {}); }, "w"));
    bad = test::random_inputs(p.dims, L.tp + 2, 1);  // inputs for another stream length
    EXPECT_TRUE(rejects([&] { run(p, bad, {}); }, "q_nope"));
    RunOptions opt;
    opt.attention_indices = TensorI({L.tp, topk_width(p.topk, L.tp) + 1}, -1);
    EXPECT_TRUE(rejects([&] { run(p, good, opt); }, "indices"));
    Problem q = p;
    q.topk = 0;
    EXPECT_TRUE(rejects([&] { run(q, good, {}); }, "topk"));
    q = p;
    q.dims.C = 0;
    EXPECT_TRUE(rejects([&] { run(q, good, {}); }, "dims.C"));
    q = p;
    q.seqlens = {5, -3};
    EXPECT_TRUE(rejects([&] { run(q, good, {}); }, "seqlens[1]"));
    q = p;
    q.cp.size = 0;
    EXPECT_TRUE(rejects([&] { run(q, good, {}); }, "cp.size"));
  }
}

}  // namespace
}  // namespace dsa
