#include "tools/args.hpp"

#include <charconv>

#include "core/errors.hpp"
#include "harness/text.hpp"

namespace dsa::cli {

int64_t parse_int(const std::string& text, const std::string& field) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  require(ec == std::errc() && end == text.data() + text.size() && !text.empty(), field,
          "must be an integer, got " + text::quoted(text));
  return v;
}

uint64_t parse_uint64(const std::string& text, const std::string& field) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  require(ec == std::errc() && end == text.data() + text.size() && !text.empty(), field,
          "must be an integer from 0 to 18446744073709551615, got " + text::quoted(text));
  return v;
}

Args::Args(int argc, char** argv, const std::set<std::string>& value_flags,
           const std::set<std::string>& switches) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-q") a = "--quiet";  // the one-letter forms of the session switches
    if (a == "-v") a = "--verbose";
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (switches.count(name)) {
      require(!inline_value, "--" + name, "is a switch and takes no value");
      switches_set_.insert(name);
    } else if (value_flags.count(name)) {
      if (!inline_value) {
        require(i + 1 < argc, "--" + name, "needs a value");
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      throw InvalidInput("--" + name, "unknown flag for this subcommand (see --help)");
    }
  }
}

bool Args::has(const std::string& name) const { return switches_set_.count(name) || values_.count(name); }

std::optional<std::string> Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::get_or(const std::string& name, const std::string& fallback) const {
  return get(name).value_or(fallback);
}

int64_t Args::get_int(const std::string& name, int64_t fallback, int64_t min_value) const {
  auto v = get(name);
  if (!v) return fallback;
  int64_t x = parse_int(*v, "--" + name);
  require(x >= min_value, "--" + name, "must be at least " + std::to_string(min_value));
  return x;
}

uint64_t Args::get_uint64(const std::string& name, uint64_t fallback) const {
  auto v = get(name);
  return v ? parse_uint64(*v, "--" + name) : fallback;
}

double Args::get_double(const std::string& name, double fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    double x = std::stod(*v, &used);
    require(used == v->size(), "--" + name, "must be a number, got " + text::quoted(*v));
    return x;
  } catch (const std::logic_error&) {
    throw InvalidInput("--" + name, "must be a number, got " + text::quoted(*v));
  }
}

std::vector<int64_t> Args::get_int_list(const std::string& name) const {
  std::vector<int64_t> out;
  auto v = get(name);
  if (!v) return out;
  size_t start = 0;
  while (start <= v->size()) {
    size_t comma = v->find(',', start);
    if (comma == std::string::npos) comma = v->size();
    out.push_back(parse_int(v->substr(start, comma - start), "--" + name));
    start = comma + 1;
  }
  return out;
}

void Args::expect_positional(const std::vector<std::string>& names) const {
  if (positional_.size() == names.size()) return;
  std::string want;
  for (auto& n : names) want += (want.empty() ? "" : " ") + n;
  throw InvalidInput(names.empty() ? "arguments" : names.front(),
                     "expected exactly: " + (want.empty() ? std::string("no positional arguments") : want));
}

}  // namespace dsa::cli
