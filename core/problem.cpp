#include "core/problem.hpp"

#include <cmath>

#include "core/errors.hpp"
#include "core/layout.hpp"

namespace dsa {

namespace {
template <class E, size_t N>
E parse_enum(const std::string& s, const std::string& field, const std::pair<const char*, E> (&table)[N]) {
  std::string allowed;
  for (auto& [n, v] : table) {
    if (s == n) return v;
    allowed += (allowed.empty() ? "" : "|") + std::string(n);
  }
  throw InvalidInput(field, "must be one of " + allowed + ", got '" + s + "'");
}
constexpr std::pair<const char*, Layout> kLayouts[] = {{"zigzag", Layout::zigzag}, {"contiguous", Layout::contiguous}};
constexpr std::pair<const char*, PadRows> kPadRows[] = {{"attend", PadRows::attend}, {"masked", PadRows::masked}};
constexpr std::pair<const char*, LossMode> kLoss[] = {
    {"off", LossMode::off}, {"sparse", LossMode::sparse}, {"dense", LossMode::dense}};
constexpr std::pair<const char*, Path> kPaths[] = {{"absorbed", Path::absorbed}, {"explicit", Path::explicit_}};
constexpr std::pair<const char*, Precision> kPrec[] = {{"exact", Precision::exact}, {"bf16", Precision::bf16}};

template <class E, size_t N>
const char* enum_name(E v, const std::pair<const char*, E> (&table)[N]) {
  for (auto& [n, x] : table)
    if (x == v) return n;
  return "?";
}
}  // namespace

const char* name(Layout v) { return enum_name(v, kLayouts); }
const char* name(PadRows v) { return enum_name(v, kPadRows); }
const char* name(LossMode v) { return enum_name(v, kLoss); }
const char* name(Path v) { return enum_name(v, kPaths); }
const char* name(Precision v) { return enum_name(v, kPrec); }
Layout parse_layout(const std::string& s, const std::string& f) { return parse_enum(s, f, kLayouts); }
PadRows parse_pad_rows(const std::string& s, const std::string& f) { return parse_enum(s, f, kPadRows); }
LossMode parse_loss_mode(const std::string& s, const std::string& f) { return parse_enum(s, f, kLoss); }
Path parse_path(const std::string& s, const std::string& f) { return parse_enum(s, f, kPaths); }
Precision parse_precision(const std::string& s, const std::string& f) { return parse_enum(s, f, kPrec); }

void validate(const Problem& p) {
  const Dims& d = p.dims;
  const std::pair<const char*, int64_t> dims[] = {{"dims.H", d.H}, {"dims.Dn", d.Dn}, {"dims.R", d.R},
                                                  {"dims.C", d.C}, {"dims.Dv", d.Dv}, {"dims.HI", d.HI},
                                                  {"dims.DI", d.DI}};
  for (auto& [field, v] : dims) require(v >= 1, field, "must be at least 1, got " + std::to_string(v));
  require(p.topk >= 1, "topk", "must be at least 1, got " + std::to_string(p.topk));
  require(std::isfinite(p.softmax_scale) && p.softmax_scale > 0, "softmax_scale", "must be finite and > 0");
  require(std::isfinite(p.coeff) && p.coeff >= 0, "loss.coeff", "must be finite and >= 0");
  // Layout rules (lengths, cp, pad_multiple) live in make_layout.
  make_layout(p.seqlens, p.cp, p.pad_rows);
}

}  // namespace dsa
