// Deterministic inputs and random cases. Every tensor element is a pure function of
// (seed, tensor name, element index) through a counter-based generator, rounded once to bf16:
// bit-identical on every platform and build.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/case.hpp"
#include "harness/draw_limits.hpp"
#include "core/layout.hpp"

namespace dsa {

// The case's inputs, adversarial features applied (InitSpec).
Inputs generate_inputs(const Case& c);

// Rank `rank`'s shard of the case's inputs: the rows L.rank_rows[rank] of every row tensor, in
// that order, and the weights whole; equal to shard_inputs(generate_inputs(c), rows) bit for bit.
// What a rank of `--backend cuda --comm mpi` generates: only those rows (and, under score_ties, the
// k_I rows they are copies of). InvalidInput("rank", ...) outside [0, cp).
Inputs generate_rank_inputs(const Case& c, int64_t rank);

// The indices injected into the attention stage ([Tp, K'] global rows), when init.inject_indices.
std::optional<TensorI> injected_indices(const Case& c);

// Profiles: smoke (CI, seconds), default, nightly (long, adversarial), production (DeepSeek-V3.2
// and GLM-5 shapes). Case i of a run is a pure function of (profile, master seed, i, paths).
// paths: the MLA paths a case may take (a backend's paths(), or fuzz --path); explicit with
// probability 0.3 when both are allowed. The path draw is spent whatever is allowed, so a
// restriction changes only the path of case i, and the default reproduces every earlier seed.
// cp: the one CP size a case may have (a backend's cp_size(): `--comm mpi` runs cases of cp = the
// MPI world size); the cp draw is spent all the same, like the path's, and a case that would
// shrink its cp to fit the profile keeps it (its padding may then exceed the profile's Tp cap).
// Throws InvalidInput("paths", ...) when paths is empty, InvalidInput("cp", ...) when cp < 1.
Case random_case(const std::string& profile, uint64_t master_seed, int64_t index,
                 const std::vector<Path>& paths = all_paths(), std::optional<int64_t> cp = std::nullopt);
// The same draw within a backend's limits (harness/draw_limits.hpp): a limit replaces the value it
// forbids (a layout, a pad-row mode, a CP size above max_cp; the later draws follow the value that
// stands) or shrinks the lengths as the profile's own Tp cap does (max_tokens). Unlimited
// DrawLimits reproduce random_case(profile, seed, index) exactly. No all-padding rank is made where
// the contiguous layout or two ranks are not allowed. InvalidInput names a limit that is empty.
Case random_case(const std::string& profile, uint64_t master_seed, int64_t index, const DrawLimits& limits);
const std::vector<std::string>& profiles();

// An estimate of the multiply-adds of one reference run of p (projections, the attention over
// S(g), the indexer over the visible pairs, the loss): what a profile's work cap bounds so that a
// case stays near a second on the CPU oracle.
double oracle_work(const Problem& p);

}  // namespace dsa
