#include "harness/schema_check.hpp"

#include <fstream>

#ifdef DSA_HAVE_VALIJSON
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>
#endif

#include "core/errors.hpp"

namespace dsa {

using nlohmann::json;

#ifdef DSA_HAVE_VALIJSON
bool schema_checks_available() { return true; }

std::string schema_violation(const json& v, const json& schema, const std::string& path) {
  // valijson reads draft 7; our schemas use only keywords draft 7 shares with 2020-12, and
  // "$ref": "#/$defs/..." is a plain JSON pointer it resolves within the document.
  valijson::Schema parsed;
  valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
  json body = schema;
  body.erase("$schema");
  parser.populateSchema(valijson::adapters::NlohmannJsonAdapter(body), parsed);
  valijson::Validator validator;
  valijson::ValidationResults results;
  if (validator.validate(parsed, valijson::adapters::NlohmannJsonAdapter(v), &results)) return "";
  // The deepest error names the offending field best (valijson also lists every enclosing one).
  valijson::ValidationResults::Error err, deepest;
  while (results.popError(err))
    if (err.context.size() > deepest.context.size()) deepest = err;
  std::string where = path;
  for (const auto& c : deepest.context) {
    if (c == "<root>") continue;
    // valijson writes object keys as [key] and array indices as [i].
    const bool index = c.size() > 2 && c.find_first_not_of("0123456789", 1) == c.size() - 1;
    where += index ? c : "." + c.substr(1, c.size() - 2);
  }
  return where + ": " + deepest.description;
}

#else
bool schema_checks_available() { return false; }

std::string schema_violation(const json&, const json&, const std::string&) {
  throw Unavailable("schema checks need valijson (Debian libvalijson-dev), absent from this build");
}
#endif

json load_schema(const std::string& file) {
  const std::string path = DSA_SOURCE_DIR "/reports/schema/" + file;
  std::ifstream f(path);
  require(f.good(), path, "cannot be read");
  return json::parse(f);
}

json load_report_schema() { return load_schema("report.schema.json"); }

}  // namespace dsa
