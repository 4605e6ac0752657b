// Judging one backend run of a prepared case (SPEC.md §9): the staged oracle, the top-k
// equivalence test and the comparison of every tensor of every checked stage, into a verdict.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "check/compare.hpp"
#include "check/oracle.hpp"
#include "check/oracle_both.hpp"
#include "check/prepared.hpp"
#include "core/verdict.hpp"

namespace dsa {

struct CaseVerdict {
  Verdict verdict = Verdict::pass;
  // The primary failure: the first failing check in stage order; stage is empty for a failure of
  // the run itself (crash, timeout), whose tensor is "-".
  std::optional<Stage> stage;
  std::string tensor;
  Failure failure = Failure::none;
  std::string bucket;               // set by the harness (backend, stage, tensor, class); empty unless fail
  std::string message;              // one line
  std::vector<TensorCheck> checks;  // every tensor of the checked stages, in catalogue order
  StageCounts oracle_stages;        // how often each oracle stage ran for this case
  // --oracle both: the second oracle's per-tensor agreement with the authority (empty otherwise).
  std::vector<OracleAgreement> oracle_agreement;
  double generate_s = 0, backend_s = 0, oracle_s = 0, compare_s = 0;

  bool oracles_disagree() const;

  bool failed() const { return verdict == Verdict::fail; }
  // "run" for a failure of the run itself, else the stage's name.
  std::string stage_name() const { return stage ? name(*stage) : "run"; }
  // Whether some check (or the run failure) has this (stage, tensor, class): shrink's invariant.
  bool has_failure(const std::string& stage, const std::string& tensor, Failure cls) const;
};

// Judges `backend` (what the backend produced for case c; empty tensors were not produced) with
// the oracle. The indexer of both precisions runs first and the backend's top-k is tested row by
// row; the attention's index set is then, per row, the backend's where that row is a legal
// equivalent and the canonical one where it is not, for every oracle stage after the indexer. So a
// tie flip never shows up downstream, and a row that is not equivalent is judged on its own without
// changing how any other row is judged. Each oracle stage runs once per precision. An exact value that is non-finite where SPEC.md says finite makes the case
// cannot-run; a pass needs every required tensor of the checked stages compared.
CaseVerdict judge(const PreparedCase& c, const Result& backend, Oracle& oracle);

}  // namespace dsa
