#include "check/gpu/oracle_gpu.hpp"

#include <unistd.h>

#include <algorithm>

#include "check/gpu/gpu_oracle.hpp"
#include "core/errors.hpp"
#include "reference/indexer_row.hpp"

namespace dsa {

namespace {

// The GPU computes every score anyway; returning them (fp64, Tp² of them) spares the judge the
// row-by-row recomputation on the CPU (the top-k test and e_l(I)), which at S 4096 took longer
// than every device stage together. Bounded by host memory: 1/64 of it per matrix, at most 2^28.
int64_t score_elements_budget() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const int64_t bytes = pages > 0 && page > 0 ? int64_t(pages) * page : int64_t{8} << 30;
  return std::clamp<int64_t>(bytes / 64 / int64_t(sizeof(double)), int64_t{1} << 22, int64_t{1} << 28);
}

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
    opt.max_score_elements = score_elements_budget();
    return gpu_oracle_run(c.problem, c.layout, c.inputs, opt);
  }
};

}  // namespace

std::unique_ptr<Oracle> make_gpu_oracle() {
  if (!gpu_oracle_available()) throw Unavailable("--oracle gpu: no CUDA device");
  return std::make_unique<GpuOracle>();
}

}  // namespace dsa
