// Bounds of a case computed from its numbers alone, before any layout or tensor is built, so that
// a case too large for this machine is refused (exit 2, naming the field, the rule and the flag
// that raises the limit) instead of being killed for memory or running for days.
//
//   rows   Tp from seqlens, cp and the pad rules (SPEC.md §1), in 128-bit arithmetic; Tp < 2^31
//          (indices are int32: a hard limit).
//   bytes  every tensor the case needs at once: the inputs, and for each of the three results
//          held together (backend, exact and lowp oracles) every output and gradient, the scores
//          matrix only where it is materialized (Tp² ≤ 2^22), all as fp64, plus the layout's own
//          tables. At most --max-bytes (default: half the machine's physical memory).
//   pairs  visible (query, key) pairs the indexer scores, Σ over rows of keys scored, in closed
//          form per segment. At most --max-pairs (default 2^31).
#pragma once

#include <cstdint>
#include <string>

#include "core/problem.hpp"

namespace dsa {

struct Limits {
  uint64_t max_bytes = 0;  // 0 = the default (half the physical memory)
  uint64_t max_pairs = uint64_t{1} << 31;
};

// The process-wide limits: every subcommand that takes a case or builds a layout sets them from
// --max-bytes and --max-pairs; case_from_json and the exec backend read them.
Limits& limits();
uint64_t default_max_bytes();  // sysconf(_SC_PHYS_PAGES) · page size / 2
uint64_t effective_max_bytes(const Limits& l);

struct Footprint {
  bool computable = false;  // false when a basic rule is broken (cp.size < 1, ...): validate() says which
  int64_t tp = 0;
  unsigned __int128 real_rows = 0, rows = 0, bytes = 0, pairs = 0;
  unsigned __int128 output_elements = 0;  // every output and gradient of one result (an outputs file)
  std::string bytes_field;                // the field that makes bytes large
};

Footprint footprint(const Problem& p);

// Throws InvalidInput(field, rule) when p is beyond the rows rule or the limits. A Problem whose
// basic rules are broken passes through: validate() names those.
void check_bounds(const Problem& p, const Limits& l = limits());

// The largest outputs.safetensors a backend can legally write for p: every output at F64 plus a
// header allowance.
uint64_t max_outputs_file_bytes(const Problem& p);
// The same for inputs.safetensors (BF16 inputs, I32 tables) as the harness writes it.
uint64_t max_inputs_file_bytes(const Problem& p);

// "--max-bytes" values: an integer, optionally with a K, M, G or T suffix (powers of 1024).
uint64_t parse_byte_count(const std::string& text, const std::string& field);

}  // namespace dsa
