// Text from outside the harness (a backend's stderr, notes, paths, values quoted in errors) made
// safe before it goes into a terminal line, JSON or XML: valid UTF-8 (every byte that is not part
// of a well-formed sequence becomes U+FFFD) and capped in length.
#pragma once

#include <cstddef>
#include <string>

namespace dsa::text {

// s with every invalid byte replaced by U+FFFD (overlong forms, surrogates and code points above
// U+10FFFF are invalid too) and, when longer than max_bytes, cut at a character boundary with
// "…[N bytes cut]" appended. max_bytes = 0 keeps the whole text.
std::string safe(const std::string& s, size_t max_bytes = 0);

// The same, keeping only the last max_bytes (a stderr tail): "[N bytes cut]…" in front.
std::string safe_tail(const std::string& s, size_t max_bytes);

// safe(s, 80) in single quotes, control characters (newlines included) shown as \n, \t, \xNN, so
// that a user value quoted in an error stays on its one line: the form every error message uses.
std::string quoted(const std::string& s, size_t max_bytes = 80);

// One line: safe(s, max_bytes) with CR/LF and other control characters shown as escapes.
std::string one_line(const std::string& s, size_t max_bytes);

// True when s is valid UTF-8.
bool valid_utf8(const std::string& s);

// s made valid UTF-8 (safe) and escaped for XML and XHTML: & < > " ' as entities, the control
// characters XML 1.0 forbids as spaces. The JUnit and HTML writers both use it.
std::string xml_escape(const std::string& s);

}  // namespace dsa::text
