// --max-bytes and --max-pairs (harness/bounds.hpp): taken by every subcommand that takes a case or
// builds a layout (fuzz, repro, replay, shrink, export, exec-worker, layout), applied process-wide.
#pragma once

#include <string>

#include "harness/bounds.hpp"
#include "core/errors.hpp"
#include "tools/command.hpp"

namespace dsa::cli {

struct LimitFlags {
  std::string max_bytes, max_pairs;  // "" = the default
};

inline void add_limit_flags(CLI::App& app, LimitFlags& f) {
  add_value(app, "--max-bytes", f.max_bytes,
            "refuse a case (exit 2) whose tensors would need more bytes than this at once; K, M, G, T suffixes",
            "BYTES", "half the physical memory")
      ->check(CLI::Validator([](std::string& s) -> std::string {
        try {
          parse_byte_count(s, "");
          return "";
        } catch (const InvalidInput& e) {
          return e.rule;
        }
      }, ""));
  add_value(app, "--max-pairs", f.max_pairs,
            "refuse a case (exit 2) whose indexer would score more visible (query, key) pairs than this",
            "N", "2147483648")
      ->check(CLI::Validator([](std::string& s) -> std::string {
        try {
          return parse_uint64(s, "") >= 1 ? "" : "must be at least 1";
        } catch (const InvalidInput& e) {
          return e.rule;
        }
      }, ""));
}

inline void apply_limit_flags(const LimitFlags& f) {
  if (!f.max_bytes.empty()) limits().max_bytes = parse_byte_count(f.max_bytes, "--max-bytes");
  if (!f.max_pairs.empty()) {
    const uint64_t x = parse_uint64(f.max_pairs, "--max-pairs");
    require(x >= 1, "--max-pairs", "must be at least 1");
    limits().max_pairs = x;
  }
}

}  // namespace dsa::cli
