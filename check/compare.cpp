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
  if (fused.empty() || exact.empty() || fused.shape != exact.shape) {
    const ValueAt none = [](int64_t) { return std::nan(""); };
    return compare_from_partials(name, fused.shape, exact.shape, {}, L, floor_at_least, none, none, none, !fused.empty(),
                                 !exact.empty());
  }
  const bool have_lowp = lowp.shape == exact.shape;
  const int64_t per_row = pad_rows_zero(name, exact.shape, L) ? exact.row_size() : 0;

  // One pass, in fixed chunks of elements on several threads (production tensors hold 10^7–10^9
  // elements); the chunks' partial results are merged in chunk order, so every figure is the same
  // whatever the thread count, and the first / worst positions are the serial pass's.
  const int64_t n = exact.size(), chunks = (n + kCompareChunk - 1) / kCompareChunk;
  std::vector<ComparePartial> parts(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(dynamic, 4) if (chunks > 4)
  for (int64_t c = 0; c < chunks; ++c) {
    ComparePartial& p = parts[c];
    for (int64_t i = c * kCompareChunk, end = std::min(n, i + kCompareChunk); i < end; ++i)
      compare_element(p, i, fused.data[i], exact.data[i], have_lowp ? lowp.data[i] : 0.0, have_lowp,
                      per_row && !L.is_real(i / per_row));
  }
  return compare_from_partials(
      name, fused.shape, exact.shape, parts, L, floor_at_least, [&](int64_t i) { return fused.data[i]; },
      [&](int64_t i) { return exact.data[i]; }, [&](int64_t i) { return have_lowp ? lowp.data[i] : std::nan(""); },
      true, true);
}

bool pad_rows_zero(const std::string& name, const Shape& shape, const StreamLayout& L) {
  return L.pad_rows == PadRows::masked && row_indexed(tensor_spec(name), shape, L);
}

TensorCheck compare_from_partials(const std::string& name, const Shape& fused_shape, const Shape& exact_shape,
                                  const std::vector<ComparePartial>& parts, const StreamLayout& L,
                                  double floor_at_least, const ValueAt& fused, const ValueAt& exact,
                                  const ValueAt& lowp, bool have_fused, bool have_exact) {
  TensorCheck r;
  r.tensor = name;
  const TensorSpec& spec = tensor_spec(name);
  r.stage = spec.stage;
  r.alpha = spec.alpha();
  if (!have_fused) {
    r.status = CheckStatus::not_checked;
    r.detail = "not produced by the backend";
    return r;
  }
  if (!have_exact) {
    r.status = CheckStatus::not_checked;
    r.detail = "no exact value for this case";
    return r;
  }
  auto fail = [&](Failure cls, std::string why, int64_t at) {
    r.status = CheckStatus::fail;
    r.failure = cls;
    r.detail = std::move(why);
    if (at >= 0) {
      r.worst = locate(name, exact_shape, at, L);
      r.worst_fused = fused(at);
      r.worst_exact = exact(at);
      r.worst_lowp = lowp(at);
    }
  };
  if (fused_shape != exact_shape) {
    fail(Failure::mismatch, "shape " + shape_str(fused_shape) + ", expected " + shape_str(exact_shape), -1);
    return r;
  }
  ComparePartial all;
  for (const ComparePartial& p : parts) merge(all, p);
  r.e_f = all.e_f, r.e_l = all.e_l, r.max_rel = all.max_rel, r.compared = all.compared;
  const int64_t worst = all.worst;
  r.floor = std::max(kFloorRel * all.scale, floor_at_least);
  r.rmse = all.finite ? std::sqrt(all.sq / all.finite) : 0;
  r.cosine = (all.nf == 0 && all.nx == 0) ? 1.0 : (all.nf == 0 || all.nx == 0) ? 0.0 : all.dot / std::sqrt(all.nf * all.nx);
  r.ratio = r.e_l > 0 ? r.e_f / r.e_l : (r.e_f > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  if (worst >= 0) {
    r.worst = locate(name, exact_shape, worst, L);
    r.worst_fused = fused(worst);
    r.worst_exact = exact(worst);
    r.worst_lowp = lowp(worst);
  }

  auto where = [&](int64_t i) {
    Location loc = locate(name, exact_shape, i, L);
    std::string s = "at " + name + shape_str(loc.index);
    if (loc.g >= 0) s += " (g=" + std::to_string(loc.g) + " rank=" + std::to_string(loc.rank) + ")";
    return s;
  };
  if (all.first_unwritten >= 0) {
    fail(Failure::unwritten, "output element never written (still the 0xFF poison) " + where(all.first_unwritten),
         all.first_unwritten);
  } else if (all.first_nan >= 0) {
    fail(Failure::nan, "NaN where the exact value is finite " + where(all.first_nan), all.first_nan);
  } else if (all.first_inf >= 0) {
    fail(Failure::inf_pattern, "infinities differ from the exact pattern " + where(all.first_inf) + ": " +
                                   std::to_string(fused(all.first_inf)) + " vs exact " + std::to_string(exact(all.first_inf)),
         all.first_inf);
  } else if (all.first_pad >= 0) {
    fail(Failure::mismatch, "masked pad row not exactly 0 " + where(all.first_pad), all.first_pad);
  } else if (!(r.e_f <= r.alpha * r.e_l + r.floor)) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "e_f %.3g > %g*e_l %.3g + floor %.3g ", r.e_f, r.alpha, r.e_l, r.floor);
    fail(Failure::mismatch, buf + where(worst), worst);
  }
  return r;
}

double loss_floor(const TensorD& kl_lowp, const TensorD& kl_exact, double coeff_over_N, double kl_floor,
                  const StreamLayout& L) {
  if (kl_lowp.shape != kl_exact.shape) return 0;
  double sq = 0;
  const int64_t rows = std::min<int64_t>(kl_exact.size(), L.tp);
  for (int64_t g = 0; g < rows; ++g) {
    if (L.key_end(g) <= L.key_begin(g) || !std::isfinite(kl_exact.data[g])) continue;
    const double d = kl_lowp.data[g] - kl_exact.data[g];
    if (std::isfinite(d)) sq += d * d;
    sq += kl_floor * kl_floor;
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
