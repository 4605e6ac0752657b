#include "harness/schema_check.hpp"

#include <fstream>

#include "reference/errors.hpp"

namespace dsa {

using nlohmann::json;

namespace {

bool has_type(const json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return false;
}

std::string check(const json& v, const json& schema, const json& root, const std::string& path) {
  const json* s = &schema;
  if (s->contains("$ref")) {
    const std::string ref = (*s)["$ref"];  // "#/$defs/name"
    s = &root["$defs"][ref.substr(ref.rfind('/') + 1)];
  }
  if (s->contains("type")) {
    const json& t = (*s)["type"];
    bool ok = false;
    if (t.is_array())
      for (auto& x : t) ok = ok || has_type(v, x);
    else
      ok = has_type(v, t);
    if (!ok) return path + ": must have type " + t.dump() + ", got " + v.dump().substr(0, 80);
  }
  if (s->contains("const") && v != (*s)["const"]) return path + ": must be " + (*s)["const"].dump();
  if (s->contains("enum")) {
    bool ok = false;
    for (auto& e : (*s)["enum"]) ok = ok || v == e;
    if (!ok) return path + ": must be one of " + (*s)["enum"].dump() + ", got " + v.dump().substr(0, 80);
  }
  if (s->contains("minimum") && v.is_number() && v.get<double>() < (*s)["minimum"].get<double>())
    return path + ": must be at least " + (*s)["minimum"].dump();
  if (s->contains("oneOf")) {
    int matches = 0;
    for (auto& alt : (*s)["oneOf"]) matches += check(v, alt, root, path).empty();
    if (matches != 1) return path + ": must match exactly one alternative, matches " + std::to_string(matches);
  }
  if (v.is_object()) {
    if (s->contains("required"))
      for (auto& r : (*s)["required"])
        if (!v.contains(r.get<std::string>())) return path + "." + r.get<std::string>() + ": is required";
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (s->contains("properties") && (*s)["properties"].contains(it.key())) {
        std::string e = check(it.value(), (*s)["properties"][it.key()], root, path + "." + it.key());
        if (!e.empty()) return e;
      } else if (s->contains("additionalProperties") && (*s)["additionalProperties"] == false) {
        return path + "." + it.key() + ": unknown field";
      }
    }
  }
  if (v.is_array() && s->contains("items"))
    for (size_t i = 0; i < v.size(); ++i) {
      std::string e = check(v[i], (*s)["items"], root, path + "[" + std::to_string(i) + "]");
      if (!e.empty()) return e;
    }
  return "";
}

}  // namespace

std::string schema_violation(const json& v, const json& schema, const std::string& path) {
  return check(v, schema, schema, path);
}

json load_report_schema() {
  const std::string path = DSA_SOURCE_DIR "/reports/schema/report.schema.json";
  std::ifstream f(path);
  require(f.good(), path, "cannot be read");
  return json::parse(f);
}

}  // namespace dsa
