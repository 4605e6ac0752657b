#include "harness/shrink.hpp"

#include <chrono>
#include <set>
#include <utility>

#include "harness/bucket.hpp"
#include "core/errors.hpp"
#include "core/layout.hpp"

namespace dsa {

namespace {

// Features and policies beyond the simplest case: every simplification lowers this or the weight.
int64_t extras(const Case& c) {
  const InitSpec& i = c.init;
  const Problem& p = c.problem;
  int64_t n = static_cast<int64_t>(c.stages.size());
  for (bool f : {i.score_ties, i.zero_rows, i.large_logits, i.huge_future_k_I, i.poison_pad_keys, i.inject_indices,
                 i.hot_keys, i.duplicate_indices})
    n += f;
  n += i.scale != 1.0;
  n += i.distribution != "normal";
  n += p.loss == LossMode::dense ? 2 : p.loss == LossMode::sparse ? 1 : 0;
  n += p.path == Path::explicit_;
  n += p.pad_rows == PadRows::masked;
  n += p.cp.pad_multiple != 0;
  n += p.cp.layout == Layout::contiguous;
  return n;
}

std::pair<int64_t, int64_t> complexity(const Case& c) { return {case_weight(c), extras(c)}; }

bool valid(const Case& c) {
  try {
    validate(c.problem);
    make_layout(c.problem.seqlens, c.problem.cp, c.problem.pad_rows);
    return true;
  } catch (const InvalidInput&) {
    return false;
  }
}

// Smaller values to try for a size x >= 1: 1, then x/2.
std::vector<int64_t> smaller(int64_t x) {
  std::vector<int64_t> v;
  if (x > 1) v.push_back(1);
  if (x / 2 > 1) v.push_back(x / 2);
  return v;
}

}  // namespace

int64_t case_weight(const Case& c) {
  const Problem& p = c.problem;
  const Dims& d = p.dims;
  int64_t tp = 0;
  try {
    tp = make_layout(p.seqlens, p.cp, p.pad_rows).tp;
  } catch (const InvalidInput&) {
    for (int64_t len : p.seqlens) tp += len;
  }
  const int64_t per_row = d.H * (d.Dn + d.R + d.Dv) + d.C + d.R + d.HI * d.DI + d.DI + d.HI;
  // cp adds communication, not work: count it so that dropping a rank is a simplification.
  return tp * per_row + p.topk + p.cp.size + static_cast<int64_t>(p.seqlens.size());
}

std::vector<Case> shrink_candidates(const Case& c, std::optional<Stage> failing_stage) {
  std::vector<Case> out;
  auto add = [&](Case x) {
    if (valid(x) && complexity(x) < complexity(c)) out.push_back(std::move(x));
  };
  const Problem& p = c.problem;

  // Check only the failing stage.
  if (c.stages.size() > 1 && failing_stage && c.checks(*failing_stage)) {
    Case x = c;
    x.stages = {*failing_stage};
    add(x);
  }
  // Fewer sequences: keep one, then drop one. Each candidate costs O(n), so with many sequences
  // (thousands of zero-length ones) the per-sequence candidates are bounded: halves first, then
  // only distinct lengths (keeping or dropping one of equal neighbours gives the same case), at
  // most kPerSequence positions. Candidates stay O(n · kPerSequence), never O(n²).
  constexpr size_t kPerSequence = 64;
  const size_t n = p.seqlens.size();
  if (n > 1) {
    if (n > 4) {
      for (bool first_half : {true, false}) {
        Case x = c;
        auto& s = x.problem.seqlens;
        if (first_half)
          s.erase(s.begin() + static_cast<std::ptrdiff_t>(n / 2), s.end());
        else
          s.erase(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(n / 2));
        add(x);
      }
    }
    std::vector<size_t> keep, drop;  // first index of each distinct length; first of each run
    std::set<int64_t> seen;
    for (size_t i = 0; i < n && keep.size() < kPerSequence; ++i)
      if (seen.insert(p.seqlens[i]).second) keep.push_back(i);
    for (size_t i = 0; i < n && drop.size() < kPerSequence; ++i)
      if (i == 0 || p.seqlens[i] != p.seqlens[i - 1]) drop.push_back(i);
    for (size_t i : keep) {
      Case x = c;
      x.problem.seqlens = {p.seqlens[i]};
      add(x);
    }
    for (size_t i : drop) {
      Case x = c;
      x.problem.seqlens.erase(x.problem.seqlens.begin() + static_cast<std::ptrdiff_t>(i));
      add(x);
    }
  }
  // Smaller cp (the pad multiple back to the layout's default).
  for (int64_t cp : {int64_t{1}, p.cp.size / 2, p.cp.size - 1}) {
    if (cp < 1 || cp >= p.cp.size) continue;
    Case x = c;
    x.problem.cp.size = cp;
    x.problem.cp.pad_multiple = 0;
    add(x);
  }
  if (p.cp.pad_multiple != 0) {
    Case x = c;
    x.problem.cp.pad_multiple = 0;
    add(x);
  }
  // Shorter sequences (zero-length ones have none; at most kPerSequence of the others).
  for (size_t i = 0, tried = 0; i < n && tried < kPerSequence; ++i)
    for (int64_t len : {p.seqlens[i] / 2, p.seqlens[i] - 1, p.seqlens[i] - 2}) {  // −2 keeps the parity (padding)
      if (len < 0 || len >= p.seqlens[i]) continue;
      Case x = c;
      x.problem.seqlens[i] = len;
      add(x);
      tried += len == p.seqlens[i] / 2;
    }
  // Fewer heads, smaller dims, smaller K.
  int64_t Dims::*dims[] = {&Dims::H, &Dims::HI, &Dims::C, &Dims::Dn, &Dims::Dv, &Dims::R, &Dims::DI};
  for (auto m : dims)
    for (int64_t v : smaller(p.dims.*m)) {
      Case x = c;
      x.problem.dims.*m = v;
      add(x);
    }
  for (int64_t k : smaller(p.topk)) {
    Case x = c;
    x.problem.topk = k;
    add(x);
  }
  // Fewer adversarial features, simpler policies.
  bool InitSpec::*flags[] = {&InitSpec::duplicate_indices, &InitSpec::hot_keys,      &InitSpec::inject_indices,
                             &InitSpec::poison_pad_keys,   &InitSpec::huge_future_k_I, &InitSpec::large_logits,
                             &InitSpec::score_ties,        &InitSpec::zero_rows};
  for (auto f : flags)
    if (c.init.*f) {
      Case x = c;
      x.init.*f = false;
      // Duplicates are made in the injected indices (case validation): they go with them.
      if (f == &InitSpec::inject_indices) x.init.duplicate_indices = false;
      add(x);
    }
  if (c.init.scale != 1.0 || c.init.distribution != "normal") {
    Case x = c;
    x.init.scale = 1.0;
    x.init.distribution = "normal";
    add(x);
  }
  if (p.loss != LossMode::off && failing_stage != Stage::loss && failing_stage != Stage::loss_backward) {
    Case x = c;
    x.problem.loss = LossMode::off;
    add(x);
  }
  if (p.loss == LossMode::dense) {
    Case x = c;
    x.problem.loss = LossMode::sparse;
    add(x);
  }
  if (p.path == Path::explicit_) {
    Case x = c;
    x.problem.path = Path::absorbed;
    add(x);
  }
  if (p.pad_rows == PadRows::masked) {
    Case x = c;
    x.problem.pad_rows = PadRows::attend;
    x.init.poison_pad_keys = false;  // only legal under masked
    add(x);
  }
  if (p.cp.layout == Layout::contiguous) {
    Case x = c;
    x.problem.cp.layout = Layout::zigzag;
    x.problem.cp.pad_multiple = 0;
    add(x);
  }
  return out;
}

ShrinkResult shrink_case(const Case& c, const CaseVerdict& v, Backend& b, const ShrinkOptions& opt) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const FailureKey key{v.stage, v.tensor, v.failure};

  ShrinkResult r;
  r.shrunk = c;
  r.verdict = v;
  bool progress = v.failed();
  while (progress) {
    progress = false;
    for (Case& x : shrink_candidates(r.shrunk, key.stage)) {
      if (r.runs >= opt.max_runs || elapsed() > opt.time_budget_s) break;
      ++r.runs;
      CaseVerdict xv;
      try {
        xv = run_case(x, b);
      } catch (const InvalidInput&) {
        continue;  // the generator refuses this combination: not a simplification
      }
      if (!xv.has_failure(key.stage ? name(*key.stage) : "run", key.tensor, key.failure)) continue;
      r.shrunk = std::move(x);
      r.verdict = std::move(xv);
      ++r.accepted;
      progress = true;
      break;
    }
  }
  // Report the bucket the shrunk case keeps: make the original failure its primary one.
  if (r.accepted && (r.verdict.stage != key.stage || r.verdict.tensor != key.tensor || r.verdict.failure != key.failure)) {
    for (auto& ch : r.verdict.checks)
      if (ch.failed() && key.stage && ch.stage == *key.stage && ch.tensor == key.tensor && ch.failure == key.failure) {
        r.verdict.stage = key.stage;
        r.verdict.tensor = key.tensor;
        r.verdict.failure = key.failure;
        r.verdict.message = ch.tensor + ": " + ch.detail;
        r.verdict.bucket = make_bucket(b.name(), name(*key.stage), key.tensor, key.failure);
        break;
      }
  }
  r.seconds = elapsed();
  return r;
}

}  // namespace dsa
