#include "check/gpu/oracle_gpu.hpp"

#include "check/gpu/gpu_oracle.hpp"
#include "core/errors.hpp"
#include "reference/indexer_row.hpp"

namespace dsa {

namespace {

class GpuOracle : public Oracle {
 public:
  std::string name() const override { return "gpu"; }

  // Row recomputation (cases too large to materialize the scores) stays on the CPU reference.
  std::vector<double> score_row(const PreparedCase& c, int64_t g, Precision precision) override {
    return indexer_score_row(c.problem, c.inputs, c.layout, g, precision);
  }

 protected:
  Result compute(const PreparedCase& c, Precision precision, const StageRequest& req) override {
    GpuOracleOptions opt;
    opt.precision = precision;
    opt.indexer = req.indexer;
    opt.attention = req.attention;
    opt.attention_indices = req.indices;
    return gpu_oracle_run(c.problem, c.layout, c.inputs, opt);
  }
};

}  // namespace

std::unique_ptr<Oracle> make_gpu_oracle() {
  if (!gpu_oracle_available()) throw Unavailable("--oracle gpu: no CUDA device");
  return std::make_unique<GpuOracle>();
}

}  // namespace dsa
