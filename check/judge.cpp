#include "check/judge.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <optional>
#include <utility>

#include "check/magnitude.hpp"
#include "check/side_thread.hpp"
#include "core/stopwatch.hpp"
#include "core/trace.hpp"
#include "core/worker_thread.hpp"

namespace dsa {

namespace {

using Clock = std::chrono::steady_clock;

const TensorD* float_result(const Result& r, std::string_view name) {
  const TensorD* out = nullptr;
  r.for_each_float([&](const std::string& n, const TensorD& t) {
    if (n == name) out = &t;
  });
  return out;
}

// e_l(I) and max|I_exact| over every visible pair: from the score matrices when both sides
// returned them, else recomputed row by row. Rows on every core either way: at Tp 9K the matrices
// hold 8·10^7 scores each.
std::pair<double, double> score_error(const PreparedCase& c, const Result& exact, const Result& lowp, Oracle& o) {
  const StreamLayout& L = c.layout;
  double e_l = 0, scale = 0;
  const bool recompute = !(exact.scores && lowp.scores);
#pragma omp parallel for schedule(dynamic, 16) reduction(max : e_l, scale)
  for (int64_t g = 0; g < L.tp; ++g) {
    std::vector<double> xr, lr;
    const double *x, *l;
    size_t n;
    if (recompute) {
      xr = o.score_row(c, g, Precision::exact);
      lr = o.score_row(c, g, Precision::bf16);
      x = xr.data(), l = lr.data(), n = std::min(xr.size(), lr.size());
    } else {
      x = exact.scores->row(g) + L.key_begin(g), l = lowp.scores->row(g) + L.key_begin(g);
      n = static_cast<size_t>(std::max<int64_t>(0, L.key_end(g) - L.key_begin(g)));
    }
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(x[i]) || !std::isfinite(l[i])) continue;
      e_l = std::max(e_l, std::abs(l[i] - x[i]));
      scale = std::max(scale, std::abs(x[i]));
    }
  }
  return {e_l, scale};
}

// SPEC.md says every exact value is finite except lse of an empty row and a score of a key that is
// not visible (both −inf). Returns the first tensor that breaks that, with a count.
std::optional<std::string> nonfinite_exact(const PreparedCase& c, const Result& exact, Oracle& o) {
  std::optional<std::string> bad;
  auto check = [&](const std::string& name, const TensorD& t, bool neg_inf_allowed) {
    if (bad) return;
    if (t.empty()) {  // held by the oracle, or not computed
      if (auto n = o.held_exact_nonfinite(name, neg_inf_allowed); n && *n)
        bad = name + " has " + std::to_string(*n) + " non-finite exact values";
      return;
    }
    int64_t n = 0;
    const int64_t size = t.size();
#pragma omp parallel for schedule(static) reduction(+ : n) if (size > (int64_t{1} << 18))
    for (int64_t i = 0; i < size; ++i) n += !std::isfinite(t.data[i]) && !(neg_inf_allowed && t.data[i] == -INFINITY);
    if (n) bad = name + " has " + std::to_string(n) + " non-finite exact values";
  };
  if (exact.scores && c.checks(Stage::indexer)) check("scores", *exact.scores, true);
  exact.for_each_float([&](const std::string& n, const TensorD& t) {
    if (c.checks(tensor_spec(n).stage)) check(n, t, n == "lse");
  });
  return bad;
}

}  // namespace

std::future<void> run_on_side_thread(std::function<void()> f) {
  static WorkerThread side;
  return side.run(std::move(f));
}

namespace {

// Runs f(exact) and f(bf16), on two threads where the oracle allows it (runs_precisions_at_once).
template <class F>
void each_precision(Oracle& o, const PreparedCase& c, F&& f) {
  if (!o.runs_precisions_at_once(c)) {
    f(Precision::exact);
    f(Precision::bf16);
    return;
  }
  std::future<void> lowp = run_on_side_thread([&] { f(Precision::bf16); });
  try {
    f(Precision::exact);
  } catch (...) {
    lowp.wait();
    throw;
  }
  lowp.get();
}

}  // namespace

bool CaseVerdict::oracles_disagree() const {
  return std::any_of(oracle_agreement.begin(), oracle_agreement.end(), [](auto& a) { return !a.agrees(); });
}

bool CaseVerdict::has_failure(const std::string& s, const std::string& t, Failure cls) const {
  if (verdict != Verdict::fail) return false;
  if (stage_name() == s && tensor == t && failure == cls) return true;
  for (auto& ch : checks)
    if (ch.failed() && name(ch.stage) == s && ch.tensor == t && ch.failure == cls) return true;
  return false;
}

CaseVerdict judge(const PreparedCase& c, const Result& f, Oracle& oracle) {
  CaseVerdict v;
  const StreamLayout& L = c.layout;
  const StageCounts before = oracle.counts();
  // What the oracle keeps on its device for this case (its inputs, its held outputs) goes when the
  // verdict is made.
  struct Release {
    Oracle& o;
    ~Release() { o.release_held(); }
  } release{oracle};

  // The indexer stage of both precisions, then the top-k equivalence, δ = α·e_l(I) + floor.
  auto t0 = Clock::now();
  std::optional<TraceSpan> span(std::in_place, "judge: indexer");
  Result exact, lowp;
  each_precision(oracle, c, [&](Precision p) {
    StageRequest indexer{true, false, std::nullopt};
    indexer.keep_inputs = true;
    (p == Precision::exact ? exact : lowp) = oracle.run(c, p, indexer);
  });
  // The scores' floor is relative to what their sums pass through (check/magnitude.hpp), at
  // least to the largest |I|; so is the KL rows' below.
  span.emplace("judge: scores' error, magnitudes");
  auto [e_l_scores, score_scale] = score_error(c, exact, lowp, oracle);
  const IndexerMagnitudes magnitudes = indexer_magnitudes(c.inputs, L);  // the loss gradients' too, below
  const double score_floor = kFloorRel * std::max(score_scale, magnitudes.score);
  const double delta = 2 * e_l_scores + score_floor;
  auto exact_row = [&](int64_t g) {
    ScoreRow r{L.key_begin(g), {}};
    if (exact.scores) r.scores.assign(exact.scores->row(g) + L.key_begin(g), exact.scores->row(g) + L.key_end(g));
    else r.scores = oracle.score_row(c, g, Precision::exact);
    return r;
  };
  std::vector<uint8_t> equivalent;
  span.emplace("judge: top-k check");
  TensorCheck topk_check = compare_topk(f.topk, c.width, L, delta, exact_row, &equivalent);
  v.oracle_s = seconds_since(t0);

  // The attention's index set (SPEC §9, stages decoupled): the injected indices, else per row the
  // backend's row where it is a legal equivalent and the canonical one where it is not, so a tie
  // flip never shows up downstream and a bad row changes how no other row is judged.
  TensorI indices = c.injected ? *c.injected : exact.topk;
  if (!c.injected && f.topk.shape == indices.shape)
    for (int64_t g = 0; g < L.tp; ++g)
      if (equivalent[g]) std::copy_n(f.topk.row(g), c.width, indices.row(g));

  // Every stage after the indexer, once per precision, on that index set.
  t0 = Clock::now();
  span.emplace("judge: attention and loss");
  // An oracle that can keep its outputs on its device does (they are compared there).
  const bool hold = oracle.holds_outputs();
  if (hold) oracle.upload_backend_outputs(f);
  each_precision(oracle, c, [&](Precision precision) {
    Result& side = precision == Precision::exact ? exact : lowp;
    Result rest = oracle.run(c, precision, {false, true, indices, hold, true});
    rest.scores = std::move(side.scores);
    rest.topk = std::move(side.topk);
    side = std::move(rest);
  });
  v.oracle_s += seconds_since(t0);
  if (auto* dual = dynamic_cast<DualOracle*>(&oracle)) v.oracle_agreement = dual->take_agreement();
  v.oracle_stages = oracle.counts() - before;

  // The comparison's time includes this scan of every exact value.
  t0 = Clock::now();
  span.emplace("judge: compare");
  if (auto why = nonfinite_exact(c, exact, oracle)) {
    v.verdict = Verdict::cannot_run;
    v.message = "the exact oracle is not finite where SPEC.md says it is: " + *why;
    v.compare_s = seconds_since(t0);
    return v;
  }

  // Compare every tensor of the checked stages, in catalogue order.
  const double coeff_over_N = c.problem.coeff / std::max<double>(1.0, static_cast<double>(L.counted_rows()));
  // A KL row passes through its scores too: log Q = I − lse(I), so a score off by its floor moves
  // the row by up to twice that (Σ_t T·|ΔlogQ_t| ≤ 2·max|ΔI|). Seen where |log Q| is 1.6e7 (large
  // logits, nightly seed 104 case 525 on the H100): fused KL 22.6 off, 1.4e-6 of it.
  const double kl_floor = std::max(kFloorRel * kl_magnitude(exact.kl, L), 2 * score_floor);
  const LossGradMagnitudes grads = loss_grad_magnitudes(magnitudes, coeff_over_N);
  for (const TensorSpec* spec : result_specs()) {
    if (!c.checks(spec->stage)) continue;
    const std::string n(spec->name);
    if (n == "topk") {
      v.checks.push_back(topk_check);
    } else if (n == "scores") {
      if (!f.scores) continue;  // optional: only small cases materialize it
      const TensorD none;
      v.checks.push_back(compare_tensor(n, *f.scores, lowp.scores ? *lowp.scores : none,
                                        exact.scores ? *exact.scores : none, L, score_floor));
    } else {
      const double floor = n == "loss"   ? loss_floor(lowp.kl, exact.kl, coeff_over_N, kl_floor, L)
                           : n == "kl"   ? kl_floor
                           : n == "dw"   ? kFloorRel * grads.dw
                           : n == "dq_I" ? kFloorRel * grads.dq_I + (exact.kink ? exact.kink->dq_I : 0)
                           : n == "dk_I" ? kFloorRel * grads.dk_I + (exact.kink ? exact.kink->dk_I : 0)
                           : n == "dq_nope" ? (exact.delta ? exact.delta->dq_nope : 0)
                           : n == "dq_pe"   ? (exact.delta ? exact.delta->dq_pe : 0)
                           : n == "dc"      ? (exact.delta ? exact.delta->dc : 0)
                           : n == "dk_pe"   ? (exact.delta ? exact.delta->dk_pe : 0)
                                            : 0;
      const TensorD& x = *float_result(exact, n);
      std::optional<TensorCheck> held;
      if (x.empty()) held = oracle.compare_held(n, *float_result(f, n), L, floor);
      v.checks.push_back(held ? std::move(*held)
                              : compare_tensor(n, *float_result(f, n), *float_result(lowp, n), x, L, floor));
    }
  }
  v.compare_s = seconds_since(t0);

  // The verdict: the first failing check in stage order (the catalogue's) is the primary failure.
  // A tensor the backend did not produce fails as unwritten unless it produced none (not-run).
  int64_t produced = 0;
  for (auto& ch : v.checks) produced += ch.status != CheckStatus::not_checked;
  for (auto& ch : v.checks) {
    if (ch.status == CheckStatus::not_checked && produced > 0) {
      ch.status = CheckStatus::fail;
      ch.failure = Failure::unwritten;
      ch.detail = "not produced by the backend (a pass needs every tensor of the checked stages)";
    } else if (ch.status == CheckStatus::pass && ch.compared == 0) {
      ch.status = CheckStatus::fail;
      ch.failure = Failure::mismatch;
      ch.detail = "no element could be compared";
    }
    if (ch.failed() && v.verdict != Verdict::fail) {
      v.verdict = Verdict::fail;
      v.stage = ch.stage;
      v.tensor = ch.tensor;
      v.failure = ch.failure;
      v.message = ch.tensor + ": " + ch.detail;
    }
  }
  if (produced == 0) {
    v.verdict = Verdict::not_run;
    v.message = "the backend produced none of the checked tensors";
  }
  return v;
}

}  // namespace dsa
