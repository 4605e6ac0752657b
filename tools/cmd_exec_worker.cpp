// dsa-parity exec-worker: the exec:CMD protocol implemented with an in-process backend, so that
// `--backend exec:"dsa-parity exec-worker --backend lowp"` round-trips through files.
#include <cstdio>

#include "harness/backend.hpp"
#include "harness/exec_protocol.hpp"
#include "core/errors.hpp"
#include "tools/args.hpp"
#include "tools/command.hpp"
#include "tools/limit_args.hpp"

namespace dsa::cli {
namespace {

int run(int argc, char** argv) {
  Args a(argc, argv, with_limit_flags({"backend"}));
  apply_limit_flags(a);
  a.expect_positional({"FOLDER"});
  const std::string folder = a.positional()[0];
  const std::string spec = a.get_or("backend", "lowp");
  require(spec.rfind("exec:", 0) != 0, "--backend", "an exec-worker cannot itself run an exec backend");
  exec::FolderInputs fi = exec::read_inputs(folder);
  const PreparedCase pc = prepare(fi.c.problem, std::move(fi.in), std::move(fi.injected), fi.c.stages);
  const BackendRun r = make_backend(spec)->run(fi.c, pc);
  // F32 wherever that is lossless (the bf16 policy's values), F64 otherwise (the exact reference).
  st::write_file(folder + "/outputs.safetensors", exec::outputs_file(r.result, exec::FloatOut::f32_when_exact));
  return 0;
}

RegisterCommand reg({"exec-worker", "[--backend lowp|reference|mutant:NAME|cuda] [--max-bytes N] [--max-pairs N] FOLDER",
                     "implement the exec:CMD protocol: read FOLDER/case.json and inputs.safetensors, "
                     "write FOLDER/outputs.safetensors",
                     run});

}  // namespace
}  // namespace dsa::cli
