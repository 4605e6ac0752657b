#include "harness/strict_json.hpp"

#include <set>
#include <vector>

#include "harness/text.hpp"

namespace dsa {

using nlohmann::json;

namespace {

struct Frame {
  bool object = false;
  std::set<std::string> keys;
  std::string key;   // the object's current key
  size_t index = 0;  // the array's current element
};

std::string path_of(const std::vector<Frame>& stack) {
  std::string p;
  for (const Frame& f : stack) {
    if (f.object) {
      if (f.key.empty() && f.keys.empty()) continue;
      p += (p.empty() ? "" : ".") + text::one_line(f.key, 80);
    } else {
      p += "[" + std::to_string(f.index) + "]";
    }
  }
  return p;
}

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 84: syntax error ..."
// without the prefix (the byte is given apart).
std::string what_went_wrong(const std::string& w) {
  const size_t col = w.find("column ");
  const size_t colon = col == std::string::npos ? std::string::npos : w.find(": ", col);
  return colon == std::string::npos ? w : w.substr(colon + 2);
}

}  // namespace

json parse_strict_json(const std::string& text, int max_depth) {
  std::vector<Frame> stack;
  auto value_done = [&] {
    if (!stack.empty() && !stack.back().object) ++stack.back().index;
  };
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (static_cast<int>(stack.size()) >= max_depth)
          // Named by its top-level field: the full path would be max_depth components long.
          throw JsonRefused(stack.front().object ? text::one_line(stack.front().key, 80) : std::string(),
                            "nests deeper than " + std::to_string(max_depth) + " levels");
        stack.push_back(Frame{ev == json::parse_event_t::object_start, {}, {}, 0});
        break;
      case json::parse_event_t::key: {
        Frame& f = stack.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) throw JsonRefused(path_of(stack), "duplicate key (JSON objects need unique keys)");
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        value_done();
        break;
      case json::parse_event_t::value: value_done(); break;
    }
    return true;
  };
  try {
    return json::parse(text, cb);
  } catch (const JsonRefused&) {
    throw;
  } catch (const json::parse_error& e) {
    // The syntax error belongs to the document, not to a field: the last key read only says where.
    const std::string where = path_of(stack);
    throw JsonRefused("", "not valid JSON at byte " + std::to_string(e.byte) +
                              (where.empty() ? std::string() : " (after " + where + ")") + ": " +
                              text::one_line(what_went_wrong(e.what()), 120));
  } catch (const json::exception& e) {  // e.g. out_of_range 406: a number beyond double (1e400)
    const std::string where = path_of(stack);
    throw JsonRefused(where, "cannot be read as JSON: " + text::one_line(e.what(), 120));
  }
}

}  // namespace dsa
