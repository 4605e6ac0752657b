// dsa-parity mutants: the planted bugs of the mutant:NAME backends, one line each.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/mutant.hpp"
#include "tools/command.hpp"

namespace dsa::cli {
namespace {
namespace cmd_mutants {  // its own names in a unity build (README "Layout of the source")

int run(bool json) {
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (auto& p : all_mutants()) j.push_back({{"name", p.name}, {"backend", std::string("mutant:") + p.name}, {"breaks", p.breaks}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  for (auto& p : all_mutants()) std::printf("%-30s %s\n", p.name, p.breaks);
  std::printf("\n%zu mutants; run one with --backend mutant:NAME (lowp with that bug planted)\n", all_mutants().size());
  return 0;
}

Run setup(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  add_switch(app, "--json", *json, "print [{name, backend, breaks}] as JSON");
  return [json, &app] {
    expect_no_extras(app);
    return run(*json);
  };
}

RegisterCommand reg({"mutants", "list the planted bugs (backends mutant:NAME) and what each breaks",
                     "  dsa-parity mutants\n  dsa-parity fuzz --backend mutant:kl_reversed --profile smoke --shrink", setup});

}  // namespace cmd_mutants
}  // namespace
}  // namespace dsa::cli
