// The part of the case space a backend implements, as `fuzz` draws and selects cases: a random
// case takes only what its backend can run, so no budget goes to cases it can only answer
// cannot-run (a Megatron worker: zigzag CP, pad rows that attend, Tp bounded by memory).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/problem.hpp"
#include "harness/case.hpp"

namespace dsa {

struct DrawLimits {
  std::vector<Path> paths = all_paths();
  std::optional<int64_t> cp;  // the one CP size (`--comm mpi`: the world size; fuzz --cp)
  std::string cp_from = "the MPI world size";  // where that size comes from, for messages
  int64_t max_cp = 0;         // the largest CP size, 0: any (a backend without CP: 1)
  std::vector<Layout> layouts = {Layout::zigzag, Layout::contiguous};
  std::vector<PadRows> pad_rows = {PadRows::attend, PadRows::masked};
  int64_t max_tokens = 0;     // the largest Tp (padded stream), 0: any

  bool allows(Path v) const;
  bool allows(Layout v) const;
  bool allows(PadRows v) const;
  bool allows_cp(int64_t size) const;
  bool unlimited() const;  // nothing narrower than every case
};

// Why case c lies outside the limits ("its layout is contiguous, not zigzag"), empty when inside.
// For the corpus selection of `fuzz` and a backend's cannot-run answer.
std::string outside(const Case& c, const DrawLimits& l);

// The limits as a phrase ("layouts zigzag, pad rows attend, Tp <= 4096"), empty when unlimited;
// paths and the one CP size are said apart by the run header, as before.
std::string limits_text(const DrawLimits& l);

}  // namespace dsa
