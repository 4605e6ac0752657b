#include "harness/bucket.hpp"

#include <cstdint>
#include <cstdio>
#include <numeric>

#include "core/layout.hpp"

namespace dsa {

std::vector<std::string> feature_tags(const Case& c) {
  const Problem& p = c.problem;
  std::vector<std::string> tags;
  if (p.cp.size > 1) tags.push_back("cp");
  if (p.cp.layout == Layout::contiguous) tags.push_back("contiguous");
  // Pad rows exist when the padded stream is longer than the real tokens.
  int64_t real = std::accumulate(p.seqlens.begin(), p.seqlens.end(), int64_t{0});
  int64_t tp = real;
  try {
    tp = make_layout(p.seqlens, p.cp, p.pad_rows).tp;
  } catch (...) {
  }
  if (tp > real) tags.push_back(p.pad_rows == PadRows::masked ? "pad-masked" : "pad");
  if (c.init.score_ties || c.init.zero_rows) tags.push_back("ties");
  for (int64_t len : p.seqlens)
    if (len <= 1 || len < p.topk) {
      tags.push_back("short-rows");
      break;
    }
  return tags;
}

std::string make_bucket(const std::string& backend, const std::string& stage, const std::string& tensor,
                        Failure failure) {
  return backend + "/" + stage + "/" + tensor + "/" + name(failure);
}

std::string bucket_file_stem(const std::string& bucket) {
  std::string s;
  for (char ch : bucket) {
    const bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                    ch == '.' || ch == '_' || ch == '+' || ch == '-';
    s += ok ? ch : ch == '/' ? '.' : '_';
  }
  if (s.size() > 120) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a of the full bucket keeps cut names distinct
    for (unsigned char ch : bucket) h = (h ^ ch) * 1099511628211ull;
    char buf[24];
    std::snprintf(buf, sizeof buf, "-%016llx", static_cast<unsigned long long>(h));
    s = s.substr(0, 100) + buf;
  }
  return s;
}

}  // namespace dsa
