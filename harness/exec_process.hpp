// What both exec backends (exec:CMD, exec2:CMD) share about the external process: quoting, the
// temporary folder, and the capped tail of what it prints.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "harness/text.hpp"

namespace dsa::exec {

namespace fs = std::filesystem;

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// Removes a folder the command may have taken permissions away inside (chmod 000): they are given
// back first. Never throws.
inline void remove_tree(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(path, ec))) {
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (!it->is_symlink(ec)) fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
  }
  fs::remove_all(path, ec);
}

// A fresh folder under $TMPDIR (or /tmp), removed on scope exit unless DSA_KEEP_EXEC_DIR is set.
// The command may have taken permissions away inside it (chmod 000): they are given back first.
struct TempFolder {
  std::string path;
  explicit TempFolder(const char* prefix = "dsa-exec") {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("exec: cannot create a folder under " + tmpl);
    path = tmpl;
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  ~TempFolder() {
    if (!std::getenv("DSA_KEEP_EXEC_DIR")) remove_tree(path);
  }
};

// What the command wrote to stdout and stderr (one pipe): only the last kKeep bytes are kept, so
// 10 GB of output costs neither memory nor disk.
struct Captured {
  static constexpr size_t kKeep = 64 * 1024;
  std::string tail;
  uint64_t total = 0;
  void add(const char* b, size_t n) {
    total += n;
    tail.append(b, n);
    if (tail.size() > 2 * kKeep) tail.erase(0, tail.size() - kKeep);
  }
  // Valid UTF-8, at most max_bytes, one paragraph: what goes into messages, reports and JUnit.
  std::string text(size_t max_bytes = 4000) const {
    std::string s = tail;
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (s.empty()) return "(empty)";
    // Control characters (escape sequences, NUL) shown as \xNN: the text goes to terminals and XML.
    std::string t = text::one_line(text::safe_tail(s, max_bytes), 2 * max_bytes);
    if (total > tail.size()) t = "(" + std::to_string(total) + " bytes in all) " + t;
    return t;
  }
};

}  // namespace dsa::exec
