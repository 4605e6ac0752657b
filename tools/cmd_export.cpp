// dsa-parity export: a case's inputs and exact outputs as safetensors, for external code.
#include <cstdio>
#include <filesystem>

#include "harness/backend.hpp"
#include "harness/exec_protocol.hpp"
#include "harness/generate.hpp"
#include "harness/run_case.hpp"
#include "core/errors.hpp"
#include "tools/command.hpp"
#include "tools/limit_args.hpp"

namespace dsa::cli {
namespace {
namespace cmd_export {  // its own names in a unity build (README "Layout of the source")

struct Flags {
  std::string file, out;
  LimitFlags limits;
};

Run setup(CLI::App& app) {
  auto f = std::make_shared<Flags>();
  add_positional(app, "CASE.json", f->file, "the case file to export");
  add_value(app, "--out", f->out, "the folder to write (created when missing; required)", "DIR");
  add_limit_flags(app, f->limits);
  return [f, &app] {
    expect_positional(app, "CASE.json", f->file);
    apply_limit_flags(f->limits);
    require(app.count("--out") > 0, "--out", "is required (the folder to write)");
    const std::string& out = f->out;
    const Case c = load_case(f->file);
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    require(!ec && std::filesystem::is_directory(out), "--out", "cannot create folder " + out);
    const PreparedCase pc = prepare_case(c);
    exec::write_inputs(out, c, pc.inputs, pc.injected);  // case.json, inputs.safetensors
    const BackendRun r = make_backend("reference")->run(c, pc);
    st::write_file(out + "/exact.safetensors", exec::outputs_file(r.result, exec::FloatOut::f64));
    std::printf("%s: case.json, inputs.safetensors, exact.safetensors (%s)\n", out.c_str(), describe(c).c_str());
    return 0;
  };
}

RegisterCommand reg({"export",
                     "write DIR/case.json, DIR/inputs.safetensors (BF16 inputs) and DIR/exact.safetensors "
                     "(the exact reference's outputs, F64)",
                     "  dsa-parity export cases/edge/shorter_than_k.json --out exported", setup});

}  // namespace cmd_export
}  // namespace
}  // namespace dsa::cli
