// dsa-parity export: a case's inputs and exact outputs as safetensors, for external code.
#include <cstdio>
#include <filesystem>

#include "harness/backend.hpp"
#include "harness/exec_protocol.hpp"
#include "harness/generate.hpp"
#include "harness/run_case.hpp"
#include "core/errors.hpp"
#include "tools/args.hpp"
#include "tools/command.hpp"
#include "tools/limit_args.hpp"

namespace dsa::cli {
namespace {

int run(int argc, char** argv) {
  Args a(argc, argv, with_limit_flags({"out"}));
  apply_limit_flags(a);
  a.expect_positional({"CASE.json"});
  const auto out = a.get("out");
  require(out.has_value(), "--out", "is required (the folder to write)");
  const Case c = load_case(a.positional()[0]);
  std::error_code ec;
  std::filesystem::create_directories(*out, ec);
  require(!ec && std::filesystem::is_directory(*out), "--out", "cannot create folder " + *out);
  const PreparedCase pc = prepare_case(c);
  exec::write_inputs(*out, c, pc.inputs, pc.injected);  // case.json, inputs.safetensors
  const BackendRun r = make_backend("reference")->run(c, pc);
  st::write_file(*out + "/exact.safetensors", exec::outputs_file(r.result, exec::FloatOut::f64));
  std::printf("%s: case.json, inputs.safetensors, exact.safetensors (%s)\n", out->c_str(), describe(c).c_str());
  return 0;
}

RegisterCommand reg({"export", "CASE.json --out DIR [--max-bytes N] [--max-pairs N]",
                     "write DIR/case.json, DIR/inputs.safetensors (BF16 inputs) and DIR/exact.safetensors "
                     "(the exact reference's outputs, F64)",
                     run});

}  // namespace
}  // namespace dsa::cli
