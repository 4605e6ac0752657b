// make_backend: the --backend names of DESIGN.md.
#include "harness/backend.hpp"

#include "core/errors.hpp"

namespace dsa {

std::unique_ptr<Backend> make_backend(const std::string& spec, const BackendOptions& opt) {
  if (spec == "reference") return make_reference_backend(spec, Precision::exact);
  if (spec == "lowp") return make_reference_backend(spec, Precision::bf16);
  if (spec == "cuda") return make_cuda_backend(opt);
  if (spec == "auto") return cuda_device_present() ? make_cuda_backend(opt) : make_reference_backend("lowp", Precision::bf16);
  if (spec.rfind("mutant:", 0) == 0)
    return make_reference_backend(spec, Precision::bf16, parse_mutant(spec.substr(7)));
  if (spec.rfind("exec:", 0) == 0) {
    require(spec.size() > 5, "backend", "exec: needs a command, e.g. exec:\"python3 my_kernel.py\"");
    return make_exec_backend(spec.substr(5), opt);
  }
  throw InvalidInput("backend", "must be one of reference|lowp|cuda|auto|mutant:NAME|exec:CMD, got '" + spec + "'");
}

}  // namespace dsa
