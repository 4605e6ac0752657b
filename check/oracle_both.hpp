// --oracle both (issue 12): the CPU reference stays the authority and a second oracle (the GPU one)
// runs every stage beside it. The verdict comes from the authority alone; per tensor, the largest
// disagreement of the second oracle is measured against two rules:
//   exact:  max|B_exact − A_exact| ≤ max(1e-12 · M, 1e-6 · e_l(A)),  M = max|A_exact|, or for the
//           scores and the loss gradients the larger magnitude their sums pass through
//           (check/magnitude.hpp, as the judge's floors)
//   lowp:   e_l(B) ≤ 2 · max(e_l(A), floor),  e_l(X) = max|X_lowp − A_exact|, floor = kFloorRel·M
// Exact: both are fp64 of the same math in different orders. A sum of cancelling terms (the KL of
// near-equal distributions: terms of size 1, a sum of 1e-5) carries the terms' rounding, so an
// exact disagreement is also accepted when it is a millionth of the authority's own lowp error:
// that small, it cannot move a verdict (the tolerance is α·e_l + floor) by more than 1e-6 of it.
// Where every term cancels (dw when Q = T on every row) the exact values are fp64 noise of the
// terms, 1e-17 against terms of 0.1: M is then the terms' size.
// (a bf16-policy oracle may round differently, but not be twice as far from the truth). ±inf must
// sit at the same positions; the exact canonical top-k must be the same set per row.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "check/oracle.hpp"

namespace dsa {

inline constexpr double kOracleExactRel = 1e-12;
inline constexpr double kOracleExactOfLowp = 1e-6;
inline constexpr double kOracleLowpFactor = 2.0;

// One tensor's agreement over the stage runs seen (the worst of each figure).
struct OracleAgreement {
  std::string tensor;
  double exact_rel = 0;    // max|B_exact − A_exact| / max|A_exact|
  double lowp_ratio = 0;   // e_l(B) / max(e_l(A), floor); 0 when lowp was not compared
  double e_l_a = 0, e_l_b = 0;
  int64_t compared = 0;    // elements compared (exact side)
  std::string detail;      // why it disagrees (empty when it agrees)
  bool agrees() const { return detail.empty(); }
};

// Worst-of merge: what a session keeps per tensor over its cases.
void merge_agreement(std::vector<OracleAgreement>& into, const std::vector<OracleAgreement>& from);

class DualOracle : public Oracle {
 public:
  DualOracle(std::unique_ptr<Oracle> authority, std::unique_ptr<Oracle> second);
  std::string name() const override;
  std::vector<double> score_row(const PreparedCase& c, int64_t g, Precision precision) override;
  // What either oracle kept for the case (StageRequest::keep_inputs) goes.
  void release_held() override {
    a_->release_held();
    b_->release_held();
    magnitudes_of_ = nullptr;
  }
  void keep_inputs_ahead(const PreparedCase& c) override {
    a_->keep_inputs_ahead(c);
    b_->keep_inputs_ahead(c);
  }
  // The agreement of every tensor since the last call, in catalogue order; resets it.
  std::vector<OracleAgreement> take_agreement();

 protected:
  Result compute(const PreparedCase& c, Precision precision, const StageRequest& req) override;

 private:
  void record(const std::string& tensor, const TensorD& a_exact, const TensorD& b_exact);
  void record_lowp(const std::string& tensor, const TensorD& a_exact, const TensorD& a_lowp, const TensorD& b_lowp);
  void judge_exact(const std::string& tensor, double e_l_a);
  // M of the rules above for the authority's exact `tensor`.
  double magnitude(const std::string& tensor, const TensorD& exact) const;
  OracleAgreement& slot(const std::string& tensor);

  std::unique_ptr<Oracle> a_, b_;
  const PreparedCase* magnitudes_of_ = nullptr;
  std::map<std::string, double> magnitudes_;  // M of the tensors with one, for case magnitudes_of_
  std::map<std::pair<bool, bool>, Result> exact_;  // the authority's exact result of each stage request
  std::vector<OracleAgreement> seen_;
  struct Pending {
    double e, scale;
    std::string where;
  };
  std::map<std::string, Pending> pending_;  // exact disagreements waiting for the lowp error
};

}  // namespace dsa
