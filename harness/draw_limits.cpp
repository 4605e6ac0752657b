#include "harness/draw_limits.hpp"

#include <algorithm>

#include "core/layout.hpp"

namespace dsa {
namespace {

template <class T>
bool limit_contains(const std::vector<T>& v, T x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

template <class T>
std::string names_joined(const std::vector<T>& v, const char* sep) {
  std::string s;
  for (T x : v) s += (s.empty() ? "" : sep) + std::string(name(x));
  return s;
}

}  // namespace

bool DrawLimits::allows(Path v) const { return limit_contains(paths, v); }
bool DrawLimits::allows(Layout v) const { return limit_contains(layouts, v); }
bool DrawLimits::allows(PadRows v) const { return limit_contains(pad_rows, v); }
bool DrawLimits::allows_cp(int64_t size) const { return cp ? size == *cp : max_cp == 0 || size <= max_cp; }

bool DrawLimits::unlimited() const {
  const DrawLimits all;
  return paths.size() == all.paths.size() && !cp && max_cp == 0 && layouts.size() == all.layouts.size() &&
         pad_rows.size() == all.pad_rows.size() && max_tokens == 0;
}

std::string outside(const Case& c, const DrawLimits& l) {
  const Problem& p = c.problem;
  if (!l.allows(p.path)) return "its path is not among " + names_joined(l.paths, "+");
  if (l.cp && p.cp.size != *l.cp)
    return "its cp is " + std::to_string(p.cp.size) + ", not " + std::to_string(*l.cp) + ", " + l.cp_from;
  if (!l.allows_cp(p.cp.size))
    return "its cp is " + std::to_string(p.cp.size) + ", above " + std::to_string(l.max_cp);
  // The layout matters only where there are ranks to lay the stream over.
  if (p.cp.size > 1 && !l.allows(p.cp.layout))
    return std::string("its layout is ") + name(p.cp.layout) + ", not " + names_joined(l.layouts, " or ");
  if (!l.allows(p.pad_rows))
    return std::string("its pad rows ") + name(p.pad_rows) + ", not " + names_joined(l.pad_rows, " or ");
  if (l.max_tokens > 0) {
    const int64_t tp = make_layout(p.seqlens, p.cp, p.pad_rows).tp;
    if (tp > l.max_tokens)
      return "its Tp is " + std::to_string(tp) + ", above " + std::to_string(l.max_tokens) + " tokens";
  }
  return "";
}

std::string limits_text(const DrawLimits& l) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (l.max_cp > 0 && !l.cp) add("cp <= " + std::to_string(l.max_cp));
  if (l.layouts.size() < DrawLimits{}.layouts.size()) add("layout " + names_joined(l.layouts, "|"));
  if (l.pad_rows.size() < DrawLimits{}.pad_rows.size()) add("pad rows " + names_joined(l.pad_rows, "|"));
  if (l.max_tokens > 0) add("Tp <= " + std::to_string(l.max_tokens));
  return s;
}

}  // namespace dsa
