// For tests: hold a JSON document to a published schema (reports/schema/), or, in a build without
// valijson (the device machines lack it), say on stderr that the schema was not checked and go on:
// the test's other assertions stand. (It used to skip the test there, which hid every assertion
// after it on the GPU machine, e.g. the MPI cuda runs' bit comparison.)
#pragma once

#include <gtest/gtest.h>

#include <iostream>

#include "harness/schema_check.hpp"

#define DSA_EXPECT_MATCHES_SCHEMA(doc, schema_file)                                                  \
  do {                                                                                               \
    if (!::dsa::schema_checks_available())                                                           \
      std::cerr << "note: schema " << (schema_file) << " not checked: built without valijson (libvalijson-dev)\n"; \
    else                                                                                             \
      EXPECT_EQ(::dsa::schema_violation((doc), ::dsa::load_schema(schema_file)), "");               \
  } while (0)
