// JSON from outside (case files, safetensors headers) parsed strictly: a duplicate key in any
// object is refused (nlohmann keeps the last one silently), nesting deeper than max_depth is refused
// before it is built (deep documents crash recursive dumps and destructors), and every nlohmann
// error (syntax, a number out of double range such as 1e400) becomes one JsonRefused naming the
// JSON path where it happened.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace dsa {

struct JsonRefused : std::runtime_error {
  std::string field;  // JSON path ("dims.H", "seqlens[3]"), "" at the top level
  std::string rule;
  JsonRefused(std::string f, std::string r)
      : std::runtime_error((f.empty() ? std::string() : f + ": ") + r), field(std::move(f)), rule(std::move(r)) {}
};

inline constexpr int kMaxJsonDepth = 64;

nlohmann::json parse_strict_json(const std::string& text, int max_depth = kMaxJsonDepth);

}  // namespace dsa
