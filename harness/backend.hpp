// A backend runs one case and returns every stage it produces (DESIGN.md "Backends").
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "check/prepared.hpp"
#include "harness/case.hpp"
#include "harness/draw_limits.hpp"
#include "core/mutant.hpp"
#include "core/result.hpp"
#include "reference/core.hpp"

namespace dsa {

// A CP rank that failed in a way that ends the session: it crashed, hung past --rank-timeout,
// disagrees with rank 0 (build, case, inputs), or the launcher ended the job while it was awaited
// (`--comm mpi`, harness/mpi_backend.hpp). The case it happened in is recorded as a failure, no
// case runs after it, and the report's context.rank_failure says which rank and how.
struct RankFailure {
  int rank = -1;
  std::string how;      // crash | timeout | disagree | terminated
  std::string message;  // one line naming the rank, the case and what it was doing
};

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
  // The one CP size it runs, nullopt: any. `--comm mpi` runs cases of cp = the MPI world size (one
  // process per rank): fuzz draws random cases of that size and selects its corpus likewise
  // (listing what it leaves out); replay and repro report a case of another size cannot-run.
  virtual std::optional<int64_t> cp_size() const { return std::nullopt; }
  // The cases it can run at all, for the draw: `fuzz` draws random cases within them and leaves
  // corpus cases outside them unselected (listed), as for paths() and cp_size(), which the default
  // carries. exec2 workers add what their capabilities declare (cp, max_tokens, layouts, pad_rows).
  virtual DrawLimits draw_limits() const;
  // Set once a rank has failed for good (see RankFailure): the session then stops.
  virtual std::optional<RankFailure> rank_failure() const { return std::nullopt; }
};

// Every result tensor of the catalogue (the default of Backend::deterministic).
std::vector<std::string> all_result_tensors();

struct BackendOptions {
  // cuda: nccl | local | auto. The reference backends (reference, lowp, mutant:NAME): auto (as
  // ever: reference global, the others rank by rank in process), local (rank by rank in process,
  // reference included) or mpi (one process per rank, harness/mpi_session.hpp).
  std::string comm = "auto";
  double exec_timeout_s = 600;    // exec, exec2: the external command's time limit (per case)
  double rank_timeout_s = 300;    // --comm mpi: the longest a case may take on the ranks
};

// The run options of a reference backend by its name (reference: exact; lowp: bf16; mutant:NAME:
// bf16 with that bug), nullopt for any other name. InvalidInput for an unknown mutant.
std::optional<RunOptions> reference_run_options(const std::string& spec);

// Whether backend `spec` takes --comm `comm` (InvalidInput("--comm", ...) naming the rule if not):
// nccl, local and auto for cuda (and auto, which may be cuda); local and auto for the reference
// backends; mpi for the reference backends when built with MPI (mpi_built), and only through
// fuzz, repro and replay under an MPI launcher; auto for the others.
void check_comm(const std::string& spec, const std::string& comm, bool mpi_built);

// reference | lowp | cuda | auto | mutant:NAME | exec:CMD | exec2:CMD. Throws InvalidInput for an unknown
// name and Unavailable when the environment cannot run it (e.g. cuda without a device).
std::unique_ptr<Backend> make_backend(const std::string& spec, const BackendOptions& opt = {});

// The CPU reference as a backend (harness/backend_reference.cpp): exact runs globally (run_core)
// unless `sharded`, bf16 always rank by rank (run_core_sharded), optionally with a planted bug.
// Named `name`.
std::unique_ptr<Backend> make_reference_backend(const std::string& name, Precision precision,
                                                Mutant mutant = Mutant::none, bool sharded = false);

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
// The tensors the cuda backend reproduces bit for bit: all but the sums over query rows through
// fp32 atomics (dc, dk_pe, dk_I; README "Determinism"). In process and under --comm mpi alike.
std::vector<std::string> cuda_deterministic_tensors();
// Whether --backend cuda --comm mpi is built: CUDA, and NCCL for the ranks' communicator.
bool cuda_mpi_built();

}  // namespace dsa
