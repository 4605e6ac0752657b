// A validator for the subset of JSON Schema 2020-12 that reports/schema/*.json use: type, const,
// enum, required, properties, additionalProperties: false, items, local $ref, oneOf, minimum.
// Enough to prove that what the harness writes matches the schema it publishes, without a
// schema library (the tests and CI use it on every report they produce).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dsa {

// The first violation as "path: rule", or "" when v is valid against schema (the document root,
// which holds the $defs that $ref points to).
std::string schema_violation(const nlohmann::json& v, const nlohmann::json& schema, const std::string& path = "$");

// The report schema shipped in the source tree (DSA_SOURCE_DIR/reports/schema/report.schema.json).
nlohmann::json load_report_schema();

}  // namespace dsa
