// For tests: hold a JSON document to a published schema (reports/schema/), or, in a build without
// valijson (the device machines lack it), skip the test with a message after its other assertions.
// Use it as a test body's last statement.
#pragma once

#include <gtest/gtest.h>

#include "harness/schema_check.hpp"

#define DSA_EXPECT_MATCHES_SCHEMA(doc, schema_file)                                                  \
  do {                                                                                               \
    if (!::dsa::schema_checks_available())                                                           \
      GTEST_SKIP() << "schema " << (schema_file) << " not checked: built without valijson (libvalijson-dev)"; \
    EXPECT_EQ(::dsa::schema_violation((doc), ::dsa::load_schema(schema_file)), "");                 \
  } while (0)
