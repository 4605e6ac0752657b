// make_backend: the --backend names of DESIGN.md.
#include "harness/backend.hpp"

#include "core/catalogue.hpp"
#include "core/errors.hpp"
#include "harness/text.hpp"

namespace dsa {

std::vector<std::string> all_result_tensors() {
  std::vector<std::string> out;
  for (const TensorSpec* s : result_specs()) out.emplace_back(s->name);
  return out;
}

std::vector<std::string> Backend::deterministic() const { return all_result_tensors(); }

std::unique_ptr<Backend> make_backend(const std::string& spec, const BackendOptions& opt) {
  // --comm: the communicators that exist. mpi (one process per rank, DESIGN.md) is not built yet:
  // refused by name rather than silently running the CPU ranks in process.
  require(opt.comm != "mpi", "--comm",
          "mpi is not available in this build (no MPI launcher yet); use nccl, local or auto");
  require(opt.comm == "auto" || opt.comm == "nccl" || opt.comm == "local", "--comm",
          "must be one of nccl|local|auto, got " + text::quoted(opt.comm));
  require(opt.comm == "auto" || spec == "cuda" || spec == "auto", "--comm",
          "chooses the communicator of the cuda backend; backend " + text::quoted(spec) +
              " runs its ranks in process (leave --comm out or set it to auto)");
  if (spec == "reference") return make_reference_backend(spec, Precision::exact);
  if (spec == "lowp") return make_reference_backend(spec, Precision::bf16);
  if (spec == "cuda") return make_cuda_backend(opt);
  if (spec == "auto") return cuda_device_present() ? make_cuda_backend(opt) : make_reference_backend("lowp", Precision::bf16);
  if (spec.rfind("mutant:", 0) == 0)
    return make_reference_backend(spec, Precision::bf16, parse_mutant(spec.substr(7)));
  if (spec.rfind("exec2:", 0) == 0) {
    require(spec.size() > 6, "backend", "exec2: needs a worker command, e.g. exec2:\"python3 -m my_worker\"");
    return make_exec2_backend(spec.substr(6), opt);
  }
  if (spec.rfind("exec:", 0) == 0) {
    require(spec.size() > 5, "backend", "exec: needs a command, e.g. exec:\"python3 my_kernel.py\"");
    return make_exec_backend(spec.substr(5), opt);
  }
  throw InvalidInput("backend", "must be one of reference|lowp|cuda|auto|mutant:NAME|exec:CMD|exec2:CMD, got " + text::quoted(spec));
}

}  // namespace dsa
