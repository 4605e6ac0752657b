#include "harness/text.hpp"

#include <cstdint>
#include <cstdio>

namespace dsa::text {

namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed UTF-8 sequence at s[i], or 0 when the byte there starts none.
size_t sequence_length(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0, min = 0;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

std::string repaired(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = sequence_length(s, i);
    if (n == 0) {
      o += kReplacement;
      ++i;
    } else {
      o.append(s, i, n);
      i += n;
    }
  }
  return o;
}

bool continuation(char ch) { return (static_cast<uint8_t>(ch) & 0xC0) == 0x80; }

}  // namespace

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string safe(const std::string& s, size_t max_bytes) {
  // Cut first (on the raw bytes, with slack for replacements), so a huge input costs no huge copy.
  const bool cut = max_bytes && s.size() > max_bytes;
  std::string o = repaired(cut ? s.substr(0, max_bytes) : s);
  if (max_bytes && o.size() > max_bytes) {
    size_t end = max_bytes;
    while (end > 0 && continuation(o[end])) --end;
    o.resize(end);
  }
  if (cut) o += "\xE2\x80\xA6[" + std::to_string(s.size() - max_bytes) + " bytes cut]";
  return o;
}

std::string safe_tail(const std::string& s, size_t max_bytes) {
  if (!max_bytes || s.size() <= max_bytes) return repaired(s);
  size_t start = s.size() - max_bytes;
  while (start < s.size() && continuation(s[start])) ++start;  // a cut character would read as invalid
  return "[" + std::to_string(start) + " bytes cut]\xE2\x80\xA6" + repaired(s.substr(start));
}

std::string one_line(const std::string& s, size_t max_bytes) {
  const std::string v = safe(s, max_bytes);
  std::string o;
  o.reserve(v.size());
  for (char ch : v) {
    const auto u = static_cast<uint8_t>(ch);
    if (ch == '\n') o += "\\n";
    else if (ch == '\r') o += "\\r";
    else if (ch == '\t') o += "\\t";
    else if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", u);
      o += buf;
    } else {
      o += ch;
    }
  }
  return o;
}

std::string quoted(const std::string& s, size_t max_bytes) { return "'" + one_line(s, max_bytes) + "'"; }

std::string xml_escape(const std::string& raw) {
  const std::string s = safe(raw);
  std::string o;
  for (char ch : s) switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t') o += ' ';
        else o += ch;
    }
  return o;
}

}  // namespace dsa::text
