// The `cuda` backend: the fused kernels of fused/. Placeholder until the kernels land.
#include "harness/backend.hpp"
#include "reference/errors.hpp"

#ifdef DSA_HAVE_CUDA
#include "fused/device.cuh"
#endif

namespace dsa {

bool cuda_device_present() {
#ifdef DSA_HAVE_CUDA
  return fused::device_count() > 0;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions&) {
  throw Unavailable("the cuda backend is not built yet");
}

}  // namespace dsa
