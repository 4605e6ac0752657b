// The `cuda` backend: the fused kernels of fused/ (fused/run.hpp), CP ranks on NCCL when every
// rank has its own GPU and on the local one-GPU communicator otherwise (--comm nccl|local|auto).
// Without CUDA in the build or without a device it throws dsa::Unavailable (exit code 3).
#include <chrono>

#include "harness/backend.hpp"
#include "core/errors.hpp"

#ifdef DSA_HAVE_CUDA
#include "fused/device.hpp"
#include "fused/run.hpp"
#endif

namespace dsa {

bool cuda_device_present() {
#ifdef DSA_HAVE_CUDA
  return fused::device_count() > 0;
#else
  return false;
#endif
}

std::vector<std::string> cuda_deterministic_tensors() {
  std::vector<std::string> all = all_result_tensors();
  std::erase_if(all, [](const std::string& n) { return n == "dc" || n == "dk_pe" || n == "dk_I"; });
  return all;
}

bool cuda_mpi_built() {
#if defined(DSA_HAVE_CUDA) && defined(DSA_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

#ifdef DSA_HAVE_CUDA
namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(fused::CommKind comm) : comm_(comm) {}
  std::string name() const override { return "cuda"; }
  // run_fused has no explicit path yet (it throws Unavailable): fuzz draws absorbed cases only.
  std::vector<Path> paths() const override { return {Path::absorbed}; }
  std::vector<std::string> deterministic() const override { return cuda_deterministic_tensors(); }
  BackendRun run(const Case& c, const PreparedCase& pc) override {
    const Inputs& in = pc.inputs;
    const std::optional<TensorI>& injected = pc.injected;
    fused::FusedOptions opt;
    opt.comm = comm_;
    opt.attention_indices = injected;
    const auto t0 = std::chrono::steady_clock::now();
    BackendRun r;
    // path = explicit throws Unavailable: the harness reports the case as not run, never a pass.
    r.result = fused::run_fused(c.problem, in, opt);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

 private:
  fused::CommKind comm_;
};

}  // namespace
#endif

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt) {
#ifdef DSA_HAVE_CUDA
  const fused::CommKind comm = fused::parse_comm(opt.comm, "--comm");
  if (!cuda_device_present()) throw Unavailable("backend cuda: no CUDA device");
  return std::make_unique<CudaBackend>(comm);
#else
  (void)opt;
  throw Unavailable("backend cuda: this build has no CUDA (configure with DSA_WITH_CUDA=ON on a machine with nvcc); no CUDA device");
#endif
}

}  // namespace dsa
