// The reference backends' RankPart: run_core_rank over MpiHostComm, every rank holding the whole
// case (the reference's ranks index global rows).
#include "harness/mpi_rank_part.hpp"

#include "harness/mpi_wire.hpp"
#include "harness/run_case.hpp"
#include "reference/comm_mpi.hpp"

namespace dsa::mpi {

uint64_t part_digest(const RankCase& rc) { return inputs_digest(rc.inputs, rc.injected); }

namespace {

class ReferencePart final : public RankPart {
 public:
  explicit ReferencePart(RunOptions opt) : opt_(std::move(opt)) {}
  RankCase generate(const Case& c, int rank) const override { return take(prepare_case(c), rank); }
  RankCase take(const PreparedCase& pc, int) const override {
    return RankCase{pc.problem, pc.layout, pc.inputs, pc.injected};
  }
  RankResult run(const RankCase& rc) override {
    RunOptions run = opt_;
    run.attention_indices = rc.injected;
    return run_core_rank(rc.problem, rc.layout, rc.inputs, run, comm_);
  }
  void observe(CollectiveObserver f) override { comm_.observer = std::move(f); }
  int64_t entered() const override { return comm_.entered(); }

 private:
  RunOptions opt_;
  MpiHostComm comm_;
};

}  // namespace

std::unique_ptr<RankPart> make_reference_part(RunOptions opt) { return std::make_unique<ReferencePart>(std::move(opt)); }

}  // namespace dsa::mpi
