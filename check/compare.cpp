#include "check/compare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "check/topk_equivalent.hpp"

namespace dsa {

namespace {

// Tensors whose leading dimension is the global stream row (everything but the weight gradients
// and the scalar loss), when the shape is the catalogue's.
bool row_indexed(const TensorSpec& t, const Shape& shape, const StreamLayout& L) {
  return t.row_indexed() && !shape.empty() && shape[0] == L.tp;
}

}  // namespace

Location locate(const std::string& name, const Shape& shape, int64_t flat, const StreamLayout& L) {
  Location loc;
  loc.index.assign(shape.size(), 0);
  for (size_t k = shape.size(); k-- > 0;) {
    loc.index[k] = shape[k] ? flat % shape[k] : 0;
    flat = shape[k] ? flat / shape[k] : 0;
  }
  const TensorSpec& spec = tensor_spec(name);
  if (row_indexed(spec, shape, L)) {
    loc.g = loc.index[0];
    auto [rank, local] = L.owner(loc.g);
    loc.rank = rank;
    loc.local = local;
    loc.sequence = L.seg[loc.g];
    loc.position = L.pos(loc.g);
    if (shape.size() >= 2) {
      if (spec.second_index_is_head())
        loc.head = loc.index[1];
      else
        loc.dim = loc.index[1];
    }
    if (shape.size() >= 3) loc.dim = loc.index[2];
  } else if (shape.size() >= 2) {  // dW_UK [H, Dn, C], dW_UV [H, Dv, C]
    loc.head = loc.index[0];
    loc.dim = loc.index[1];
  }
  return loc;
}

TensorCheck compare_tensor(const std::string& name, const TensorD& fused, const TensorD& lowp,
                           const TensorD& exact, const StreamLayout& L, double floor_at_least) {
  TensorCheck r;
  r.tensor = name;
  const TensorSpec& spec = tensor_spec(name);
  r.stage = spec.stage;
  r.alpha = spec.alpha();
  if (fused.empty()) {
    r.status = CheckStatus::not_checked;
    r.detail = "not produced by the backend";
    return r;
  }
  if (exact.empty()) {
    r.status = CheckStatus::not_checked;
    r.detail = "no exact value for this case";
    return r;
  }
  auto fail = [&](Failure cls, std::string why, int64_t at) {
    r.status = CheckStatus::fail;
    r.failure = cls;
    r.detail = std::move(why);
    if (at >= 0) {
      r.worst = locate(name, exact.shape, at, L);
      r.worst_fused = fused.data[at];
      r.worst_exact = exact.data[at];
      r.worst_lowp = lowp.shape == exact.shape ? lowp.data[at] : std::nan("");
    }
  };
  if (fused.shape != exact.shape) {
    fail(Failure::mismatch, "shape " + shape_str(fused.shape) + ", expected " + shape_str(exact.shape), -1);
    return r;
  }
  const bool have_lowp = lowp.shape == exact.shape;
  const bool pad_zero = L.pad_rows == PadRows::masked && row_indexed(spec, exact.shape, L);
  const int64_t per_row = pad_zero ? exact.row_size() : 0;

  // One pass, in fixed chunks of elements on several threads (production tensors hold 10^7–10^9
  // elements); the chunks' partial results are merged in chunk order, so every figure is the same
  // whatever the thread count, and the first / worst positions are the serial pass's.
  struct Partial {
    int64_t first_unwritten = -1, first_nan = -1, first_inf = -1, first_pad = -1, worst = -1;
    int64_t compared = 0, finite = 0;
    double scale = 0, e_f = 0, e_l = 0, max_rel = 0, sq = 0, dot = 0, nf = 0, nx = 0;
  };
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t n = exact.size(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<Partial> parts(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(dynamic, 4) if (chunks > 4)
  for (int64_t c = 0; c < chunks; ++c) {
    Partial& p = parts[c];
    for (int64_t i = c * kChunk, end = std::min(n, i + kChunk); i < end; ++i) {
      const double x = exact.data[i], f = fused.data[i];
      if (is_unwritten(f)) {
        if (p.first_unwritten < 0) p.first_unwritten = i;
        continue;
      }
      if (pad_zero && !L.is_real(i / per_row) && std::isfinite(x) && f != 0 && p.first_pad < 0) p.first_pad = i;
      if (std::isnan(x)) continue;  // the exact oracle never yields NaN; nothing to compare against
      if (std::isinf(x)) {
        if (f != x && p.first_inf < 0) p.first_inf = i;
        if (f == x) ++p.compared;
        continue;
      }
      if (std::isnan(f)) {
        if (p.first_nan < 0) p.first_nan = i;
        continue;
      }
      if (std::isinf(f)) {
        if (p.first_inf < 0) p.first_inf = i;
        continue;
      }
      ++p.compared;
      ++p.finite;
      p.scale = std::max(p.scale, std::abs(x));
      const double err = std::abs(f - x);
      if (p.worst < 0 || err > p.e_f) p.e_f = err, p.worst = i;
      if (have_lowp && std::isfinite(lowp.data[i])) p.e_l = std::max(p.e_l, std::abs(lowp.data[i] - x));
      if (x != 0) p.max_rel = std::max(p.max_rel, err / std::abs(x));
      p.sq += err * err;
      p.dot += f * x;
      p.nf += f * f;
      p.nx += x * x;
    }
  }
  int64_t first_unwritten = -1, first_nan = -1, first_inf = -1, first_pad = -1, worst = -1;
  double scale = 0, sq = 0, dot = 0, nf = 0, nx = 0;
  int64_t finite = 0;
  auto first = [](int64_t& at, int64_t candidate) {
    if (at < 0) at = candidate;
  };
  for (const Partial& p : parts) {
    first(first_unwritten, p.first_unwritten), first(first_nan, p.first_nan), first(first_inf, p.first_inf);
    first(first_pad, p.first_pad);
    if (p.worst >= 0 && (worst < 0 || p.e_f > r.e_f)) r.e_f = p.e_f, worst = p.worst;
    r.compared += p.compared, finite += p.finite;
    scale = std::max(scale, p.scale), r.e_l = std::max(r.e_l, p.e_l), r.max_rel = std::max(r.max_rel, p.max_rel);
    sq += p.sq, dot += p.dot, nf += p.nf, nx += p.nx;
  }
  r.floor = std::max(kFloorRel * scale, floor_at_least);
  r.rmse = finite ? std::sqrt(sq / finite) : 0;
  r.cosine = (nf == 0 && nx == 0) ? 1.0 : (nf == 0 || nx == 0) ? 0.0 : dot / std::sqrt(nf * nx);
  r.ratio = r.e_l > 0 ? r.e_f / r.e_l : (r.e_f > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  if (worst >= 0) {
    r.worst = locate(name, exact.shape, worst, L);
    r.worst_fused = fused.data[worst];
    r.worst_exact = exact.data[worst];
    r.worst_lowp = have_lowp ? lowp.data[worst] : std::nan("");
  }

  auto where = [&](int64_t i) {
    Location loc = locate(name, exact.shape, i, L);
    std::string s = "at " + name + shape_str(loc.index);
    if (loc.g >= 0) s += " (g=" + std::to_string(loc.g) + " rank=" + std::to_string(loc.rank) + ")";
    return s;
  };
  if (first_unwritten >= 0) {
    fail(Failure::unwritten, "output element never written (still the 0xFF poison) " + where(first_unwritten), first_unwritten);
  } else if (first_nan >= 0) {
    fail(Failure::nan, "NaN where the exact value is finite " + where(first_nan), first_nan);
  } else if (first_inf >= 0) {
    fail(Failure::inf_pattern, "infinities differ from the exact pattern " + where(first_inf) + ": " +
                          std::to_string(fused.data[first_inf]) + " vs exact " + std::to_string(exact.data[first_inf]),
         first_inf);
  } else if (first_pad >= 0) {
    fail(Failure::mismatch, "masked pad row not exactly 0 " + where(first_pad), first_pad);
  } else if (!(r.e_f <= r.alpha * r.e_l + r.floor)) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "e_f %.3g > %g*e_l %.3g + floor %.3g ", r.e_f, r.alpha, r.e_l, r.floor);
    fail(Failure::mismatch, buf + where(worst), worst);
  }
  return r;
}

double loss_floor(const TensorD& kl_lowp, const TensorD& kl_exact, double coeff_over_N) {
  if (kl_lowp.shape != kl_exact.shape) return 0;
  double sq = 0;
  for (int64_t g = 0; g < kl_exact.size(); ++g) {
    const double d = kl_lowp.data[g] - kl_exact.data[g];
    if (std::isfinite(d)) sq += d * d;
  }
  return std::abs(coeff_over_N) * std::sqrt(sq);
}

TensorCheck compare_topk(const TensorI& fused, int64_t width, const StreamLayout& L, double delta,
                         const std::function<ScoreRow(int64_t)>& exact_row, std::vector<uint8_t>* equivalent) {
  TensorCheck r;
  r.tensor = "topk";
  r.stage = Stage::indexer;
  r.alpha = 2;
  r.floor = delta;
  if (fused.empty()) {
    r.status = CheckStatus::not_checked;
    r.detail = "not produced by the backend";
    return r;
  }
  const Shape want = {L.tp, width};
  if (fused.shape != want) {
    r.status = CheckStatus::fail;
    r.failure = Failure::topk_not_equivalent;
    r.detail = "shape " + shape_str(fused.shape) + ", expected " + shape_str(want);
    return r;
  }
  // Rows in parallel: exact_row may recompute O(Tp·HI·DI) scores per row on large cases.
  std::vector<TopkVerdict> rows(L.tp);
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t g = 0; g < L.tp; ++g) {
    const ScoreRow s = exact_row(g);
    rows[g] = topk_equivalent(fused.row(g), width, s.scores.data(), static_cast<int64_t>(s.scores.size()),
                              s.key_begin, delta);
  }
  if (equivalent) {
    equivalent->resize(L.tp);
    for (int64_t g = 0; g < L.tp; ++g) (*equivalent)[g] = rows[g].ok;
  }
  int64_t bad = 0;
  for (int64_t g = 0; g < L.tp; ++g) {
    ++r.compared;
    if (rows[g].ok) continue;
    if (bad++ == 0) {
      r.worst = locate("topk", fused.shape, g * width, L);
      r.detail = "row " + std::to_string(g) + ": " + rows[g].why;
    }
  }
  r.e_f = static_cast<double>(bad);  // rows that are not equivalent
  if (bad) {
    r.status = CheckStatus::fail;
    r.failure = Failure::topk_not_equivalent;
    r.detail = std::to_string(bad) + " of " + std::to_string(L.tp) + " rows not equivalent; first " + r.detail;
  }
  return r;
}

}  // namespace dsa
