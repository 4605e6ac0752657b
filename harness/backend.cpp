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

DrawLimits Backend::draw_limits() const {
  DrawLimits l;
  l.paths = paths();
  l.cp = cp_size();
  return l;
}

#ifdef DSA_HAVE_CUDA
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif

void check_comm(const std::string& spec, const std::string& comm, bool mpi_built) {
  require(comm == "auto" || comm == "nccl" || comm == "local" || comm == "mpi", "--comm",
          "must be one of nccl|local|auto|mpi, got " + text::quoted(comm));
  if (comm == "auto") return;
  const bool reference = reference_run_options(spec).has_value();
  if (comm == "mpi") {
    require(mpi_built, "--comm",
            "mpi is not available in this build (configured without Open MPI: install libopenmpi-dev and "
            "openmpi-bin and configure again); use local or auto");
    if (spec == "cuda") {
      require(cuda_mpi_built(), "--comm",
              "mpi with backend cuda needs CUDA and NCCL in the build (one process per GPU, NCCL bootstrapped over "
              "MPI); this build has no " + std::string(kBuiltWithCuda ? "NCCL (nccl.h and libnccl were not found at configure time)" : "CUDA") +
              "; use --comm local or nccl in one process");
      return;
    }
    require(reference, "--comm",
            "mpi runs the CPU reference backends (reference, lowp, mutant:NAME) and cuda one process per CP rank, "
            "not backend " + text::quoted(spec) + " (give one of those explicitly)");
    return;
  }
  const bool cuda = spec == "cuda" || spec == "auto";
  require(cuda || (reference && comm == "local"), "--comm",
          "chooses the communicator of the cuda backend (nccl|local|auto) and of the reference backends "
          "(local|mpi|auto); backend " + text::quoted(spec) + " runs its ranks in process (leave --comm out or set it to auto)");
}

std::unique_ptr<Backend> make_backend(const std::string& spec, const BackendOptions& opt) {
  // mpi needs one process per rank, made by an MPI launcher: fuzz, repro and replay run it through
  // harness/mpi_session.hpp, never through here.
  require(opt.comm != "mpi", "--comm",
          "mpi runs one process per CP rank under an MPI launcher: mpirun -np N dsa-parity fuzz|repro|replay "
          "--comm mpi ...; this command runs in one process (use --comm local)");
  check_comm(spec, opt.comm, false);
  if (auto ref = reference_run_options(spec))
    return make_reference_backend(spec, ref->precision, ref->mutant, /*sharded=*/opt.comm == "local");
  if (spec == "cuda") return make_cuda_backend(opt);
  if (spec == "auto") return cuda_device_present() ? make_cuda_backend(opt) : make_reference_backend("lowp", Precision::bf16);
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
