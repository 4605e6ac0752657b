#include "core/rank_shard.hpp"

#include <algorithm>
#include <iterator>
#include <limits>

#include "core/errors.hpp"

namespace dsa {
namespace {

// Writes local row i of a rank's [Tq, ...] tensor into global row g of a [Tp, ...] tensor.
template <class T>
void place_rows(const Tensor<T>& local, const std::vector<int64_t>& rows, Tensor<T>& global) {
  if (local.data.empty()) return;
  if (global.data.empty()) {
    Shape s = local.shape;
    s[0] = static_cast<int64_t>(global.shape.empty() ? 0 : global.shape[0]);
    global = Tensor<T>(s);
  }
  const int64_t n = local.row_size();
  for (size_t i = 0; i < rows.size(); ++i) std::copy_n(local.row(i), n, global.row(rows[i]));
}

}  // namespace

Result assemble_ranks(const StreamLayout& L, const std::vector<RankResult>& ranks,
                      const std::vector<std::vector<int64_t>>& own_rows) {
  require(!ranks.empty() && ranks.size() == own_rows.size(), "ranks",
          "one result per rank is needed, got " + std::to_string(ranks.size()) + " for " +
              std::to_string(own_rows.size()) + " ranks");
  Result r;
  auto global_rows = [&](const TensorD& t) {
    if (t.shape.empty()) return TensorD();  // a stage not run (attention_backward = false)
    Shape s = t.shape;
    s[0] = L.tp;
    return TensorD(s);
  };
  const RankResult& r0 = ranks[0];
  if (!r0.scores.data.empty()) r.scores = TensorD({L.tp, L.tp}, -std::numeric_limits<double>::infinity());
  if (!r0.topk.shape.empty()) r.topk = TensorI({L.tp, r0.topk.shape[1]}, -1);
  TensorD* g[] = {&r.O, &r.O_lat, &r.lse, &r.kl, &r.dq_nope, &r.dq_pe, &r.dq_I, &r.dw, &r.dc, &r.dk_pe, &r.dk_I};
  const TensorD RankResult::*l[] = {&RankResult::O,     &RankResult::O_lat,   &RankResult::lse,
                                    &RankResult::kl,    &RankResult::dq_nope, &RankResult::dq_pe,
                                    &RankResult::dq_I,  &RankResult::dw,      &RankResult::dc,
                                    &RankResult::dk_pe, &RankResult::dk_I};
  for (size_t k = 0; k < std::size(g); ++k) *g[k] = global_rows(r0.*l[k]);
  for (size_t q = 0; q < ranks.size(); ++q) {
    if (r.scores) place_rows(ranks[q].scores, own_rows[q], *r.scores);
    if (!r.topk.shape.empty()) place_rows(ranks[q].topk, own_rows[q], r.topk);
    for (size_t k = 0; k < std::size(g); ++k) place_rows(ranks[q].*l[k], own_rows[q], *g[k]);
  }
  r.dW_UK = r0.dW_UK;
  r.dW_UV = r0.dW_UV;
  if (!r0.kl.shape.empty()) r.loss = TensorD({1}, r0.loss);  // the loss stage ran
  r.kink = r0.kink;
  r.delta = r0.delta;
  return r;
}

Result assemble_ranks(const StreamLayout& L, const std::vector<RankResult>& ranks) {
  return assemble_ranks(L, ranks, L.rank_rows);
}

Result assemble_whole(RankResult&& rank) {
  Result r;
  if (!rank.scores.data.empty()) r.scores = std::move(rank.scores);
  r.topk = std::move(rank.topk);
  r.O = std::move(rank.O), r.O_lat = std::move(rank.O_lat), r.lse = std::move(rank.lse), r.kl = std::move(rank.kl);
  r.dq_nope = std::move(rank.dq_nope), r.dq_pe = std::move(rank.dq_pe);
  r.dq_I = std::move(rank.dq_I), r.dw = std::move(rank.dw);
  r.dc = std::move(rank.dc), r.dk_pe = std::move(rank.dk_pe), r.dk_I = std::move(rank.dk_I);
  r.dW_UK = std::move(rank.dW_UK), r.dW_UV = std::move(rank.dW_UV);
  if (!r.kl.shape.empty()) r.loss = TensorD({1}, rank.loss);  // the loss stage ran
  r.kink = rank.kink;
  r.delta = rank.delta;
  return r;
}

Inputs shard_inputs(const Inputs& in, const std::vector<int64_t>& rows) {
  Inputs out;
  out.W_UK = in.W_UK;
  out.W_UV = in.W_UV;
  TensorD Inputs::*const per_row[] = {&Inputs::q_nope, &Inputs::q_pe, &Inputs::c, &Inputs::k_pe,
                                      &Inputs::q_I,    &Inputs::k_I,  &Inputs::w, &Inputs::dO};
  for (auto m : per_row) {
    const TensorD& s = in.*m;
    Shape shape = s.shape;
    shape[0] = static_cast<int64_t>(rows.size());
    TensorD t(shape);
    const int64_t w = s.row_size();
    for (size_t i = 0; i < rows.size(); ++i) std::copy_n(s.row(rows[i]), w, t.row(static_cast<int64_t>(i)));
    out.*m = std::move(t);
  }
  return out;
}

}  // namespace dsa
