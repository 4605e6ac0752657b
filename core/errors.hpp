// Bad input is one clear error naming the field and the rule (exit code 2 at the CLI).
#pragma once

#include <stdexcept>
#include <string>

namespace dsa {

struct InvalidInput : std::runtime_error {
  std::string field, rule;
  InvalidInput(std::string f, std::string r)
      : std::runtime_error(f + ": " + r), field(std::move(f)), rule(std::move(r)) {}
};

// The request is valid but this environment cannot run it (exit code 3), e.g. no GPU.
struct Unavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void require(bool ok, const std::string& field, const std::string& rule) {
  if (!ok) throw InvalidInput(field, rule);
}

}  // namespace dsa
