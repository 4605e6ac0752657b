#include "harness/oracle_choice.hpp"

#include "check/oracle_both.hpp"
#include "core/errors.hpp"
#include "harness/backend.hpp"
#ifdef DSA_HAVE_CUDA
#include "check/gpu/oracle_gpu.hpp"
#endif

namespace dsa {

std::unique_ptr<Oracle> make_oracle(const std::string& spec) {
  require(spec == "cpu" || spec == "gpu" || spec == "both" || spec == "auto", "--oracle",
          "must be cpu, gpu, both or auto, got '" + spec + "'");
  if (spec == "cpu" || (spec == "auto" && !cuda_device_present())) return make_cpu_oracle();
#ifdef DSA_HAVE_CUDA
  if (spec == "both") return std::make_unique<DualOracle>(make_cpu_oracle(), make_gpu_oracle());
  return make_gpu_oracle();
#else
  throw Unavailable("--oracle " + spec + ": built without CUDA");
#endif
}

}  // namespace dsa
