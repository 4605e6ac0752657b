// dsa-parity exec-worker: the exec:CMD protocol implemented with an in-process backend, so that
// `--backend exec:"dsa-parity exec-worker --backend lowp"` round-trips through files.
#include <cstdio>

#include "harness/backend.hpp"
#include "harness/exec_protocol.hpp"
#include "core/errors.hpp"
#include "tools/command.hpp"
#include "tools/limit_args.hpp"

namespace dsa::cli {
namespace {
namespace cmd_exec_worker {  // its own names in a unity build (README "Layout of the source")

struct Flags {
  std::string folder, backend = "lowp";
  LimitFlags limits;
};

Run setup(CLI::App& app) {
  auto f = std::make_shared<Flags>();
  add_positional(app, "FOLDER", f->folder, "the exec protocol's folder (case.json and inputs.safetensors)");
  add_value(app, "--backend", f->backend, "the in-process backend that computes the outputs: lowp | reference | "
            "mutant:NAME | cuda (not exec:)", "B");
  add_limit_flags(app, f->limits);
  return [f, &app] {
    expect_no_extras(app);
    apply_limit_flags(f->limits);
    expect_positional(app, "FOLDER", f->folder);
    const std::string& spec = f->backend;
    require(spec.rfind("exec:", 0) != 0, "--backend", "an exec-worker cannot itself run an exec backend");
    exec::FolderInputs fi = exec::read_inputs(f->folder);
    const PreparedCase pc = prepare(fi.c.problem, std::move(fi.in), std::move(fi.injected), fi.c.stages);
    const BackendRun r = make_backend(spec)->run(fi.c, pc);
    // F32 wherever that is lossless (the bf16 policy's values), F64 otherwise (the exact reference).
    st::write_file(f->folder + "/outputs.safetensors", exec::outputs_file(r.result, exec::FloatOut::f32_when_exact));
    return 0;
  };
}

RegisterCommand reg({"exec-worker",
                     "implement the exec:CMD protocol: read FOLDER/case.json and inputs.safetensors, "
                     "write FOLDER/outputs.safetensors",
                     "  dsa-parity fuzz --backend 'exec:dsa-parity exec-worker --backend lowp' --profile smoke", setup});

}  // namespace cmd_exec_worker
}  // namespace
}  // namespace dsa::cli
