// Validation against the published JSON Schemas (reports/schema/*.json) through valijson: the
// tests and CI hold every case and report the harness writes to the schema it publishes.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dsa {

// Whether this build has valijson (Debian libvalijson-dev); without it schema_violation throws
// dsa::Unavailable.
bool schema_checks_available();

// The first violation as "path: rule", or "" when v is valid against schema (the document root,
// which holds the $defs that $ref points to).
std::string schema_violation(const nlohmann::json& v, const nlohmann::json& schema, const std::string& path = "$");

// A schema shipped in the source tree (DSA_SOURCE_DIR/reports/schema/FILE).
nlohmann::json load_schema(const std::string& file);
nlohmann::json load_report_schema();

}  // namespace dsa
