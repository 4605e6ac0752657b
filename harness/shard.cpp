#include "harness/shard.hpp"

#include <charconv>

#include "core/errors.hpp"
#include "harness/text.hpp"

namespace dsa {

namespace {

// A decimal integer of digits only (no sign, no blanks), within int64.
bool digits(const std::string& s, int64_t& v) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

Shard parse_shard(const std::string& text, const std::string& field) {
  const std::string rule = "must be I/N, integers with 0 \u2264 I < N (this job is shard I of N: it runs case number i "
                           "and the corpus file at position i when i % N == I), got " +
                           text::quoted(text);
  const size_t slash = text.find('/');
  Shard s;
  require(slash != std::string::npos && digits(text.substr(0, slash), s.index) &&
              digits(text.substr(slash + 1), s.count),
          field, rule);
  require(s.count >= 1 && s.index < s.count, field, rule);
  return s;
}

}  // namespace dsa
