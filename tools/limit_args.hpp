// --max-bytes and --max-pairs (harness/bounds.hpp): taken by every subcommand that takes a case or
// builds a layout (fuzz, repro, replay, shrink, export, exec-worker, layout), applied process-wide.
#pragma once

#include <set>
#include <string>

#include "harness/bounds.hpp"
#include "core/errors.hpp"
#include "tools/args.hpp"

namespace dsa::cli {

inline std::set<std::string> with_limit_flags(std::set<std::string> flags) {
  flags.insert({"max-bytes", "max-pairs"});
  return flags;
}

inline void apply_limit_flags(const Args& a) {
  if (auto v = a.get("max-bytes")) limits().max_bytes = parse_byte_count(*v, "--max-bytes");
  if (auto v = a.get("max-pairs")) {
    const uint64_t x = parse_uint64(*v, "--max-pairs");
    require(x >= 1, "--max-pairs", "must be at least 1");
    limits().max_pairs = x;
  }
}

}  // namespace dsa::cli
