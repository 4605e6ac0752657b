// Flag parsing for the subcommands: `--name value`, `--name=value` and boolean `--name`.
// Unknown flags, missing values and malformed numbers are InvalidInput (exit code 2).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dsa::cli {

class Args {
 public:
  // value_flags take a value; switches do not. Names are given without the leading "--".
  Args(int argc, char** argv, const std::set<std::string>& value_flags,
       const std::set<std::string>& switches = {});

  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& name) const;
  std::optional<std::string> get(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback, int64_t min_value = INT64_MIN) const;
  uint64_t get_uint64(const std::string& name, uint64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;
  std::vector<int64_t> get_int_list(const std::string& name) const;  // "5,11,0"
  // Exactly n positional arguments, named for the error message.
  void expect_positional(const std::vector<std::string>& names) const;

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> switches_set_;
  std::vector<std::string> positional_;
};

int64_t parse_int(const std::string& text, const std::string& field);
// 0 … 2^64 − 1 (seeds, limits).
uint64_t parse_uint64(const std::string& text, const std::string& field);

}  // namespace dsa::cli
