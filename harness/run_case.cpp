#include "harness/run_case.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>

#include <omp.h>

#include "harness/bucket.hpp"
#include "harness/generate.hpp"
#include "reference/core.hpp"
#include "reference/errors.hpp"

namespace dsa {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// I[g,t] for one visible pair, in fp64 (exact) or with fp32 accumulation (the bf16 policy's
// scores: inputs are bf16 values, products and sums in fp32).
template <class Real>
Real score(const Problem& p, const Inputs& in, int64_t g, int64_t t) {
  const int64_t HI = p.dims.HI, DI = p.dims.DI;
  const double* q = in.q_I.row(g);
  const double* k = in.k_I.row(t);
  const double* w = in.w.row(g);
  Real s = 0;
  for (int64_t h = 0; h < HI; ++h) {
    Real u = 0;
    for (int64_t d = 0; d < DI; ++d) u += static_cast<Real>(q[h * DI + d]) * static_cast<Real>(k[d]);
    if (p.relu && u < 0) u = 0;
    s += static_cast<Real>(w[h]) * u;
  }
  return s;
}

ScoreRow row_from_matrix(const TensorD& scores, const StreamLayout& L, int64_t g) {
  ScoreRow r;
  r.key_begin = L.key_begin(g);
  const double* s = scores.row(g);
  r.scores.assign(s + r.key_begin, s + L.key_end(g));
  return r;
}

// e_l(I) and max|I_exact| over every visible pair: from the oracles' score matrices when both
// returned them, else recomputed row by row.
std::pair<double, double> score_error(const Problem& p, const Inputs& in, const StreamLayout& L,
                                      const Result& exact, const Result& lowp) {
  double e_l = 0, scale = 0;
  // O(Tp²·HI·DI) when recomputed (large cases): rows in parallel; a lookup otherwise.
  const bool recompute = !(exact.scores && lowp.scores);
#pragma omp parallel for schedule(dynamic, 16) reduction(max : e_l, scale) if (recompute)
  for (int64_t g = 0; g < L.tp; ++g)
    for (int64_t t = L.key_begin(g); t < L.key_end(g); ++t) {
      double x, l;
      if (exact.scores && lowp.scores) {
        x = exact.scores->at(g, t);
        l = lowp.scores->at(g, t);
      } else {
        x = score<double>(p, in, g, t);
        l = score<float>(p, in, g, t);
      }
      if (!std::isfinite(x) || !std::isfinite(l)) continue;
      e_l = std::max(e_l, std::abs(l - x));
      scale = std::max(scale, std::abs(x));
    }
  return {e_l, scale};
}

// Same selected key set in every row (slot order and −1 placement are free, SPEC.md §4).
bool same_sets(const TensorI& a, const TensorI& b) {
  if (a.shape != b.shape) return false;
  for (int64_t g = 0; g < a.dim(0); ++g) {
    std::set<int32_t> sa, sb;
    for (int64_t i = 0; i < a.row_size(); ++i) {
      if (a.row(g)[i] >= 0) sa.insert(a.row(g)[i]);
      if (b.row(g)[i] >= 0) sb.insert(b.row(g)[i]);
    }
    if (sa != sb) return false;
  }
  return true;
}

const TensorD* float_output(const Result& r, const std::string& name) {
  const TensorD* out = nullptr;
  r.for_each_float([&](const std::string& n, const TensorD& t) {
    if (n == name) out = &t;
  });
  return out;
}

}  // namespace

bool CaseVerdict::has_failure(const std::string& s, const std::string& t, const std::string& cls) const {
  if (verdict != "fail") return false;
  if (stage == s && tensor == t && failure == cls) return true;
  for (auto& c : checks)
    if (c.failed() && c.stage == s && c.tensor == t && c.failure == cls) return true;
  return false;
}

ScoreRow exact_score_row(const Problem& p, const Inputs& in, const StreamLayout& L, int64_t g) {
  ScoreRow r;
  r.key_begin = L.key_begin(g);
  for (int64_t t = r.key_begin; t < L.key_end(g); ++t) r.scores.push_back(score<double>(p, in, g, t));
  return r;
}

CaseVerdict run_case(const Case& c, Backend& b) {
  const Problem& p = c.problem;
  validate(p);
  const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
  const int64_t width = topk_width(p.topk, L.tp);
  const Inputs in = generate_inputs(c);
  const std::optional<TensorI> injected = injected_indices(c);
  const std::vector<std::string> tags = feature_tags(c);

  CaseVerdict v;
  auto run_failure = [&](const char* cls, const std::string& msg) {
    v.verdict = "fail";
    v.stage = "run";
    v.tensor = "-";
    v.failure = cls;
    v.message = msg;
    v.bucket = make_bucket(b.name(), v.stage, v.tensor, cls, tags);
  };

  // The backend.
  BackendRun run;
  auto t0 = Clock::now();
  try {
    run = b.run(c, in, injected);
  } catch (const Unavailable& e) {
    v.verdict = "cannot-run";
    v.message = e.what();
    v.backend_s = since(t0);
    return v;
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    const bool timeout = msg.find("timed out") != std::string::npos;  // the exec backend's time limit
    run_failure(timeout ? kTimeout : kCrash, msg);
    v.backend_s = since(t0);
    return v;
  }
  v.backend_s = run.seconds > 0 ? run.seconds : since(t0);
  const Result& f = run.result;

  // The oracles (SPEC.md §9): exact, then lowp with the attention indices the backend used.
  t0 = Clock::now();
  RunOptions exact_opt, lowp_opt;
  exact_opt.precision = Precision::exact;
  lowp_opt.precision = Precision::bf16;
  exact_opt.attention_indices = injected;
  Result exact = run_core(p, in, exact_opt);
  const bool backend_topk = !f.topk.empty();
  lowp_opt.attention_indices = injected ? *injected : (backend_topk && f.topk.shape == exact.topk.shape) ? f.topk : exact.topk;
  Result lowp = run_core(p, in, lowp_opt);

  // Top-k equivalence against the exact scores, δ = α·e_l(I) + floor.
  auto [e_l_scores, score_scale] = score_error(p, in, L, exact, lowp);
  const double delta = 2 * e_l_scores + kFloorRel * score_scale;
  auto exact_row = [&](int64_t g) {
    return exact.scores ? row_from_matrix(*exact.scores, L, g) : exact_score_row(p, in, L, g);
  };
  TensorCheck topk_check = compare_topk(f.topk, width, L, delta, exact_row);
  if (!injected) {
    if (topk_check.status == "pass") {
      // Decoupled stages: recompute the exact oracle on the backend's keys when they differ.
      if (!same_sets(f.topk, exact.topk)) {
        exact_opt.attention_indices = f.topk;
        exact = run_core(p, in, exact_opt);
      }
    } else if (backend_topk) {
      // Not equivalent (or malformed): both oracles use the exact top-k.
      lowp_opt.attention_indices = exact.topk;
      lowp = run_core(p, in, lowp_opt);
    }
  }
  v.oracle_s = since(t0);

  // Compare every tensor of the stages the case checks.
  t0 = Clock::now();
  if (c.checks("indexer")) {
    v.checks.push_back(topk_check);
    if (f.scores) {
      TensorD none;
      v.checks.push_back(compare_tensor("scores", *f.scores, lowp.scores ? *lowp.scores : none,
                                        exact.scores ? *exact.scores : none, L));
    }
  }
  const double coeff_over_N = p.coeff / std::max<double>(1.0, static_cast<double>(L.counted_rows()));
  f.for_each_float([&](const std::string& name, const TensorD& t) {
    if (!c.checks(stage_of(name))) return;
    const double floor = name == "loss" ? loss_floor(lowp.kl, exact.kl, coeff_over_N) : 0;
    v.checks.push_back(compare_tensor(name, t, *float_output(lowp, name), *float_output(exact, name), L, floor));
  });
  v.compare_s = since(t0);
  auto stage_rank = [](const TensorCheck& ch) {
    const auto& s = all_stages();
    return std::find(s.begin(), s.end(), ch.stage) - s.begin();
  };
  std::stable_sort(v.checks.begin(), v.checks.end(),
                   [&](const TensorCheck& a, const TensorCheck& b) { return stage_rank(a) < stage_rank(b); });

  // The verdict: the first failing check in stage order is the primary failure.
  int64_t checked = 0;
  for (auto& ch : v.checks) {
    checked += ch.status != "not-checked";
    if (ch.failed() && v.verdict != "fail") {
      v.verdict = "fail";
      v.stage = ch.stage;
      v.tensor = ch.tensor;
      v.failure = ch.failure;
      v.message = ch.tensor + ": " + ch.detail;
      v.bucket = make_bucket(b.name(), ch.stage, ch.tensor, ch.failure, tags);
    }
  }
  if (v.verdict != "fail" && checked == 0) {
    v.verdict = "not-run";
    v.message = "the backend produced none of the checked tensors";
  }
  return v;
}

}  // namespace dsa
