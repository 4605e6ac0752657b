#include "harness/oracle_choice.hpp"

#include "core/errors.hpp"
#include "harness/backend.hpp"
#ifdef DSA_HAVE_CUDA
#include "check/gpu/oracle_gpu.hpp"
#endif

namespace dsa {

std::unique_ptr<Oracle> make_oracle(const std::string& spec) {
  require(spec == "cpu" || spec == "gpu" || spec == "auto", "--oracle", "must be cpu, gpu or auto, got '" + spec + "'");
  if (spec == "cpu" || (spec == "auto" && !cuda_device_present())) return make_cpu_oracle();
#ifdef DSA_HAVE_CUDA
  return make_gpu_oracle();
#else
  throw Unavailable("--oracle gpu: built without CUDA");
#endif
}

}  // namespace dsa
