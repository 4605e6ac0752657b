// The reference as a backend: `reference` (exact, global), `lowp` (bf16 policy, rank by rank) and
// `mutant:NAME` (lowp with one planted bug).
#include <chrono>

#include "harness/backend.hpp"
#include "reference/core.hpp"

namespace dsa {

namespace {

class ReferenceBackend final : public Backend {
 public:
  ReferenceBackend(std::string name, Precision precision, Mutant mutant, bool sharded)
      : name_(std::move(name)), precision_(precision), mutant_(mutant), sharded_(sharded || precision != Precision::exact) {}

  std::string name() const override { return name_; }

  BackendRun run(const Case& c, const PreparedCase& pc) override {
    const Inputs& in = pc.inputs;
    const std::optional<TensorI>& injected = pc.injected;
    RunOptions opt;
    opt.precision = precision_;
    opt.attention_indices = injected;
    opt.mutant = mutant_;
    const auto t0 = std::chrono::steady_clock::now();
    BackendRun r;
    // The exact oracle runs globally (unless --comm local asks for its ranks); the low-precision
    // one executes rank by rank like a fused backend would, so CP planted bugs (layout,
    // reduce-scatter, per-rank means) can act.
    r.result = sharded_ ? run_core_sharded(c.problem, in, opt) : run_core(c.problem, in, opt);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

 private:
  std::string name_;
  Precision precision_;
  Mutant mutant_;
  bool sharded_;
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend(const std::string& name, Precision precision, Mutant mutant,
                                                bool sharded) {
  return std::make_unique<ReferenceBackend>(name, precision, mutant, sharded);
}

std::optional<RunOptions> reference_run_options(const std::string& spec) {
  RunOptions opt;
  if (spec == "reference") return opt;
  opt.precision = Precision::bf16;
  if (spec == "lowp") return opt;
  if (spec.rfind("mutant:", 0) != 0) return std::nullopt;
  opt.mutant = parse_mutant(spec.substr(7));
  return opt;
}

}  // namespace dsa
