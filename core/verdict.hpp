// Verdicts of a case, statuses of a tensor check and failure classes of a bucket (DESIGN.md).
// Enums everywhere; their names appear only at the JSON and text edge (reports, JUnit, stdout).
#pragma once

#include <optional>
#include <string_view>

namespace dsa {

enum class Verdict {
  pass,        // every tensor of the checked stages compared and within tolerance
  fail,        // a parity failure, a crash or a timeout
  not_run,     // the backend produced none of the checked tensors
  cannot_run,  // this environment or backend cannot run the case (never a pass)
};

enum class CheckStatus { pass, fail, not_checked };

enum class Failure {
  none,
  mismatch,             // e_f > α·e_l + floor, or a masked pad row not exactly 0
  nan,                  // NaN where the exact value is finite
  inf_pattern,          // ±inf not at exactly the exact value's positions
  unwritten,            // an element still holding the poison, or a tensor the backend did not write
  topk_not_equivalent,  // SPEC §4 equivalence broken
  crash,                // the backend threw or exited non-zero
  timeout,              // the backend ran past its time limit
  nondeterministic,     // --repeat: a tensor declared deterministic changed bits between runs, or
                        // another one's run-to-run spread exceeded its tolerance
};

inline const char* name(Verdict v) {
  switch (v) {
    case Verdict::pass: return "pass";
    case Verdict::fail: return "fail";
    case Verdict::not_run: return "not-run";
    case Verdict::cannot_run: return "cannot-run";
  }
  return "?";
}

inline const char* name(CheckStatus s) {
  switch (s) {
    case CheckStatus::pass: return "pass";
    case CheckStatus::fail: return "fail";
    case CheckStatus::not_checked: return "not-checked";
  }
  return "?";
}

inline const char* name(Failure f) {
  switch (f) {
    case Failure::none: return "";
    case Failure::mismatch: return "mismatch";
    case Failure::nan: return "nan";
    case Failure::inf_pattern: return "inf-pattern";
    case Failure::unwritten: return "unwritten";
    case Failure::topk_not_equivalent: return "topk-not-equivalent";
    case Failure::crash: return "crash";
    case Failure::timeout: return "timeout";
    case Failure::nondeterministic: return "nondeterministic";
  }
  return "?";
}

inline std::optional<Verdict> parse_verdict(std::string_view s) {
  for (Verdict v : {Verdict::pass, Verdict::fail, Verdict::not_run, Verdict::cannot_run})
    if (s == name(v)) return v;
  return std::nullopt;
}

inline std::optional<Failure> parse_failure(std::string_view s) {
  for (Failure f : {Failure::mismatch, Failure::nan, Failure::inf_pattern, Failure::unwritten,
                    Failure::topk_not_equivalent, Failure::crash, Failure::timeout, Failure::nondeterministic})
    if (s == name(f)) return f;
  return std::nullopt;
}

}  // namespace dsa
