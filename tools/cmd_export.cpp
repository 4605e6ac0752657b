// dsa-parity export: a case's inputs and exact outputs as safetensors, for external code; with
// --backend, also what that backend returned, so a failure can be taken apart outside the harness
// (recompute a gradient from the backend's own forward outputs, say).
#include <cstdio>
#include <filesystem>

#include "harness/backend.hpp"
#include "harness/exec_protocol.hpp"
#include "harness/generate.hpp"
#include "harness/run_case.hpp"
#include "core/errors.hpp"
#include "tools/command.hpp"
#include "tools/limit_args.hpp"
#include "tools/session_args.hpp"

namespace dsa::cli {
namespace {
namespace cmd_export {  // its own names in a unity build (README "Layout of the source")

struct Flags {
  std::string file, out, backend, comm = "auto";
  LimitFlags limits;
};

Run setup(CLI::App& app) {
  auto f = std::make_shared<Flags>();
  add_positional(app, "CASE.json", f->file, "the case file to export");
  add_value(app, "--out", f->out, "the folder to write (created when missing; required)", "DIR");
  add_value(app, "--backend", f->backend,
            std::string("also run this implementation and write its outputs to DIR/backend.safetensors (F64 of "
                        "the values it returned): ") + kBackendHelp,
            "B");
  add_comm_flag(app, f->comm);
  add_limit_flags(app, f->limits);
  return [f, &app] {
    expect_positional(app, "CASE.json", f->file);
    apply_limit_flags(f->limits);
    require(app.count("--out") > 0, "--out", "is required (the folder to write)");
    const std::string& out = f->out;
    require(!f->backend.empty() || app.count("--comm") == 0, "--comm", "applies to --backend, which is not given");
    std::unique_ptr<Backend> backend;
    if (!f->backend.empty()) {
      require(f->comm != "mpi", "--comm", "mpi is for fuzz, repro and replay under an MPI launcher, not export");
      BackendOptions bopt;
      bopt.comm = f->comm;
      check_comm(f->backend, bopt.comm, false);
      backend = make_backend(f->backend, bopt);  // before any output: an unknown name writes nothing
    }
    const Case c = load_case(f->file);
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    require(!ec && std::filesystem::is_directory(out), "--out", "cannot create folder " + out);
    PreparedCase pc = prepare_case(c);
    exec::write_inputs(out, c, pc.inputs, pc.injected);  // case.json, inputs.safetensors
    const BackendRun r = make_backend("reference")->run(c, pc);
    st::write_file(out + "/exact.safetensors", exec::outputs_file(r.result, exec::FloatOut::f64));
    std::string written = "case.json, inputs.safetensors, exact.safetensors";
    if (backend) {
      // What the case's run would say: cannot-run or a crash is reported, exit 1, the exact files kept.
      const std::optional<Case> runs = backend_case(c, *backend);
      const char* fail = nullptr;
      std::string why;
      try {
        if (!runs) throw Unavailable("it implements none of the case's stages");
        pc.stages = runs->stages;  // the exact run is done: the inputs serve the backend, uncopied
        const BackendRun b = backend->run(*runs, pc);
        st::write_file(out + "/backend.safetensors", exec::outputs_file(b.result, exec::FloatOut::f64));
        written += ", backend.safetensors (" + backend->name() + ")";
      } catch (const Unavailable& e) {
        fail = "cannot run the case", why = e.what();
      } catch (const std::exception& e) {
        fail = "failed on the case", why = e.what();
      }
      if (fail) {
        std::fprintf(stderr, "export: backend %s %s: %s (wrote %s)\n", backend->name().c_str(), fail, why.c_str(),
                     written.c_str());
        return 1;
      }
    }
    std::printf("%s: %s (%s)\n", out.c_str(), written.c_str(), describe(c).c_str());
    return 0;
  };
}

RegisterCommand reg({"export",
                     "write DIR/case.json, DIR/inputs.safetensors (BF16 inputs) and DIR/exact.safetensors "
                     "(the exact reference's outputs, F64); with --backend B also DIR/backend.safetensors (B's outputs, F64)",
                     "  dsa-parity export cases/edge/shorter_than_k.json --out exported --backend lowp", setup});

}  // namespace cmd_export
}  // namespace
}  // namespace dsa::cli
