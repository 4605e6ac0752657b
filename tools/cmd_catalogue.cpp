// dsa-parity catalogue: THE tensor catalogue (core/catalogue.hpp) as a table or, with --json, as
// the JSON that the Python package (python/dsa_parity/catalogue.py) reads at run time.
#include <cstdio>

#include "core/catalogue.hpp"
#include "harness/exec_protocol.hpp"
#include "tools/command.hpp"

namespace dsa::cli {
namespace {
namespace cmd_catalogue {  // its own names in a unity build (README "Layout of the source")

int run(bool json) {
  if (json) {
    std::fputs(exec::catalogue_json().c_str(), stdout);
    return 0;
  }
  std::printf("%-10s %-9s %-19s %-5s %-14s %s\n", "name", "role", "stage", "dtype", "shape", "meaning");
  for (const TensorSpec& t : catalogue()) {
    const char* role = t.role == Role::input      ? "input"
                       : t.role == Role::injected ? "injected"
                       : t.role == Role::output   ? "output"
                                                  : "gradient";
    std::printf("%-10.*s %-9s %-19s %-5s %-14s %.*s%s\n", int(t.name.size()), t.name.data(), role, name(t.stage),
                name(t.dtype), shape_rule(t).c_str(), int(t.meaning.size()), t.meaning.data(),
                t.optional ? " (optional)" : "");
  }
  return 0;
}

Run setup(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  add_switch(app, "--json", *json, "print the catalogue as the JSON the Python package reads (python/dsa_parity)");
  return [json, &app] {
    expect_no_extras(app);
    return run(*json);
  };
}

RegisterCommand reg({"catalogue", "print the tensor catalogue (names, roles, stages, dtypes, shape rules); --json for tools",
                     "  dsa-parity catalogue --json", setup});

}  // namespace cmd_catalogue
}  // namespace
}  // namespace dsa::cli
