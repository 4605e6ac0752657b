#include "check/oracle.hpp"

#include "reference/core.hpp"
#include "reference/indexer_row.hpp"

namespace dsa {

Result Oracle::run(const PreparedCase& c, Precision precision, const StageRequest& req) {
  const int p = precision == Precision::exact ? 0 : 1;
  {
    std::lock_guard<std::mutex> lock(counts_mu_);
    counts_.indexer[p] += req.indexer;
    counts_.attention[p] += req.attention;
  }
  return compute(c, precision, req);
}

namespace {

class CpuOracle : public Oracle {
 public:
  std::string name() const override { return "cpu"; }

  std::vector<double> score_row(const PreparedCase& c, int64_t g, Precision precision) override {
    return indexer_score_row(c.problem, c.inputs, c.layout, g, precision);
  }

 protected:
  Result compute(const PreparedCase& c, Precision precision, const StageRequest& req) override {
    RunOptions opt;
    opt.precision = precision;
    opt.indexer = req.indexer;
    opt.attention = req.attention;
    opt.attention_indices = req.indices;
    return run_core(c.problem, c.layout, c.inputs, opt);
  }
};

}  // namespace

std::unique_ptr<Oracle> make_cpu_oracle() { return std::make_unique<CpuOracle>(); }

}  // namespace dsa
