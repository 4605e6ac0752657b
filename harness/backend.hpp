// A backend runs one case and returns every stage it produces (DESIGN.md "Backends").
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "check/prepared.hpp"
#include "harness/case.hpp"
#include "core/mutant.hpp"
#include "core/result.hpp"

namespace dsa {

struct BackendRun {
  Result result;        // tensors left empty were not produced: reported "not checked", never a pass
  double seconds = 0;   // wall time of the run
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // pc: the case validated, laid out and generated once (pc.injected: the indices the attention
  // must use when the case injects them).
  // Throws std::runtime_error when the implementation fails (a "crash" bucket).
  virtual BackendRun run(const Case& c, const PreparedCase& pc) = 0;
  // The MLA paths (SPEC.md §5) it implements. `fuzz` draws random cases only from these, and
  // selects its corpus likewise (listing what it leaves out), so a backend with one path is not
  // flooded with cases it can only report as cannot-run; `replay` runs every file (cannot-run).
  virtual std::vector<Path> paths() const { return all_paths(); }
  // The stages it implements. run_case checks only the case's stages among these (the others are
  // listed in the verdict's message as not checked); a case none of whose stages it implements is
  // cannot-run. exec2:CMD workers declare theirs in the capabilities handshake.
  virtual std::vector<Stage> stages() const { return {std::begin(kStages), std::end(kStages)}; }
  // The result tensors it promises bitwise reproducible run to run (`--repeat N` holds it to that;
  // the others must stay within tolerance of the first run). The in-process CPU backends are
  // deterministic everywhere; cuda declares all but its atomic reductions; exec2 workers declare
  // theirs in the capabilities ("deterministic"); exec v1 cannot declare any.
  virtual std::vector<std::string> deterministic() const;
};

// Every result tensor of the catalogue (the default of Backend::deterministic).
std::vector<std::string> all_result_tensors();

struct BackendOptions {
  std::string comm = "auto";      // cuda only: nccl | local | auto
  double exec_timeout_s = 600;    // exec, exec2: the external command's time limit (per case)
};

// reference | lowp | cuda | auto | mutant:NAME | exec:CMD | exec2:CMD. Throws InvalidInput for an unknown
// name and Unavailable when the environment cannot run it (e.g. cuda without a device).
std::unique_ptr<Backend> make_backend(const std::string& spec, const BackendOptions& opt = {});

// The CPU reference as a backend (harness/backend_reference.cpp): exact runs globally (run_core),
// bf16 runs rank by rank (run_core_sharded), optionally with a planted bug. Named `name`.
std::unique_ptr<Backend> make_reference_backend(const std::string& name, Precision precision,
                                                Mutant mutant = Mutant::none);

// An external implementation behind the exec:CMD protocol (harness/backend_exec.cpp, README).
std::unique_ptr<Backend> make_exec_backend(const std::string& command, const BackendOptions& opt);

// A persistent worker behind the exec2:CMD protocol v2 (harness/backend_exec2.cpp, README): started
// here (capabilities handshake; Unavailable when the worker cannot complete it), restarted after a
// crash or a timeout.
std::unique_ptr<Backend> make_exec2_backend(const std::string& command, const BackendOptions& opt);

// The fused kernels (harness/backend_cuda.cpp). Throws Unavailable when built without CUDA or
// when no device is present.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt);
bool cuda_device_present();

}  // namespace dsa
