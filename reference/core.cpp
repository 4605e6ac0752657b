// The DSA core (SPEC.md §3–§7), globally or rank by rank: run_core is one rank holding every row;
// run_core_sharded runs cp ranks on threads and joins them with the collectives a fused backend
// uses. The per-rank math is detail::Rank (rank.hpp, indexer.hpp, attention.hpp, loss.hpp).
#include "reference/core.hpp"

#include <omp.h>

#include <algorithm>
#include <numeric>
#include <thread>

#include "reference/attention.hpp"
#include "reference/comm.hpp"
#include "core/errors.hpp"
#include "reference/indexer.hpp"
#include "reference/loss.hpp"

namespace dsa {
namespace {

using detail::Rank;
using detail::RankOutput;
using detail::RankPlan;

RankOutput run_rank(const Problem& p, const StreamLayout& L, const Inputs& in, const RunOptions& opt,
                    const RankPlan& plan) {
  if (opt.precision == Precision::exact) return Rank<ExactPolicy>(p, L, in, opt, plan).run();
  return Rank<Bf16Policy>(p, L, in, opt, plan).run();
}

void check_indices(const StreamLayout& L, const Problem& p, const RunOptions& opt) {
  require(opt.indexer || opt.attention_indices.has_value(), "indices",
          "the attention needs attention_indices when the indexer is not run");
  if (opt.attention_indices) {
    const Shape want = {L.tp, topk_width(p.topk, L.tp)};
    require(opt.attention_indices->shape == want, "indices",
            "must have shape " + shape_str(want) + ", got " + shape_str(opt.attention_indices->shape));
  }
}

void check_run(const Problem& p, const StreamLayout& L, const Inputs& in, const RunOptions& opt) {
  validate(p);
  check_shapes(in, p.dims, L.tp);
  check_indices(L, p, opt);
}

// The rows a rank computes with: its real rows, or the rows a planted layout bug makes it believe.
std::vector<std::vector<int64_t>> believed_rows(const Problem& p, const StreamLayout& L, Mutant mutant) {
  auto rows = L.rank_rows;
  const int64_t cp = L.cp;
  if (mutant == Mutant::zigzag_chunk_swap && L.kind == Layout::zigzag) {
    for (int64_t r = 0; r < cp; ++r) {
      rows[r].clear();
      for (int64_t s = 0; s < L.segments(); ++s) {
        const int64_t h = (L.cu[s + 1] - L.cu[s]) / (2 * cp);
        for (int64_t chunk : {2 * cp - 1 - r, r})
          for (int64_t i = 0; i < h; ++i) rows[r].push_back(L.cu[s] + chunk * h + i);
      }
    }
  }
  if (mutant == Mutant::contiguous_read_as_zigzag && L.kind == Layout::contiguous && L.tp % (2 * cp) == 0) {
    const int64_t h = L.tp / (2 * cp);
    for (int64_t r = 0; r < cp; ++r) {
      rows[r].clear();
      for (int64_t chunk : {r, 2 * cp - 1 - r})
        for (int64_t i = 0; i < h; ++i) rows[r].push_back(chunk * h + i);
    }
  }
  (void)p;
  return rows;
}

// Every rank's plan of a sharded run (the communicator left for the caller to set): the rows it
// computes with, the order of the all-gathered keys (the believed rows, rank after rank) and the
// rows it really holds. One function for the threads of run_core_sharded and the processes of
// run_core_rank, so a planted layout bug acts the same on both.
std::vector<RankPlan> rank_plans(const Problem& p, const StreamLayout& L, Mutant mutant) {
  const auto believed = believed_rows(p, L, mutant);
  std::vector<int64_t> gather_order;
  for (auto& rows : believed) gather_order.insert(gather_order.end(), rows.begin(), rows.end());
  std::vector<RankPlan> plans(L.cp);
  for (int64_t r = 0; r < L.cp; ++r) plans[r] = {believed[r], gather_order, L.rank_rows[r], nullptr};
  return plans;
}

}  // namespace

Result run_core(const Problem& p, const Inputs& in, const RunOptions& opt) {
  const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
  check_run(p, L, in, opt);
  return run_core(p, L, in, opt);
}

Result run_core(const Problem& p, const StreamLayout& L, const Inputs& in, const RunOptions& opt) {
  check_indices(L, p, opt);
  RankPlan plan;
  plan.rows.resize(L.tp);
  std::iota(plan.rows.begin(), plan.rows.end(), 0);
  plan.own_rows = plan.rows;
  plan.gather_order = plan.rows;
  return assemble_whole(run_rank(p, L, in, opt, plan));
}

Result run_core_sharded(const Problem& p, const Inputs& in, const RunOptions& opt) {
  const StreamLayout L = make_layout(p.seqlens, p.cp, p.pad_rows);
  check_run(p, L, in, opt);
  const int cp = static_cast<int>(L.cp);
  LocalHostGroup group(cp);
  std::vector<RankOutput> outs(cp);
  std::vector<std::exception_ptr> errors(cp);
  std::vector<RankPlan> plans = rank_plans(p, L, opt.mutant);
  const int threads_per_rank = std::max(1, omp_get_max_threads() / cp);
  std::vector<std::thread> threads;
  for (int r = 0; r < cp; ++r) {
    plans[r].comm = &group.comm(r);
    threads.emplace_back([&, r] {
      omp_set_num_threads(threads_per_rank);
      try {
        outs[r] = run_rank(p, L, in, opt, plans[r]);
      } catch (...) {
        errors[r] = std::current_exception();  // a throwing rank would deadlock the others; none throws after validation
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return assemble_ranks(L, outs);
}

RankResult run_core_rank(const Problem& p, const StreamLayout& L, const Inputs& in, const RunOptions& opt,
                         HostComm& comm) {
  require(comm.size() == L.cp, "cp.size",
          "the communicator has " + std::to_string(comm.size()) + " ranks, the case " + std::to_string(L.cp));
  check_indices(L, p, opt);
  RankPlan plan = rank_plans(p, L, opt.mutant).at(comm.rank());
  plan.comm = &comm;
  return run_rank(p, L, in, opt, plan);
}


}  // namespace dsa
