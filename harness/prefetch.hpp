// The next cases, made ready on other threads while the current case runs (fuzz, the case
// benchmark): their inputs are prepared ahead, on one thread; and, once the current case's backend
// run is done, the backend may run the next case too (run_backends_ahead), on another, beside the
// current case's oracle and comparison and the preparation of the case after it. At production
// shapes generating a case takes about a second of host time and the fused backend's run another
// (conversions and transfers around ~70 ms of kernels): on one thread, one after the other, they
// took longer than a GPU oracle's judge (H100, S 4096: 2.0 s a case against a 1.4 s judge).
#pragma once

#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "check/oracle.hpp"
#include "check/prepared.hpp"
#include "core/worker_thread.hpp"
#include "harness/backend.hpp"
#include "harness/case.hpp"

namespace dsa {

// A backend run made ahead of its case's turn: what run() returned or threw, and its wall time.
struct BackendAhead {
  BackendRun run;
  std::exception_ptr error;  // judged where the case would have called run() itself
  double seconds = 0;
};

// The input bytes up to which a case's backend may run beside the judge of another, with this
// oracle: 1/32 of its device's memory (the oracle's two precisions and the backend then all fit at
// once); 0 for an oracle on the host, which leaves no idle host for a run ahead.
double backend_ahead_limit(const Oracle& oracle);

class CasePrefetch {
 public:
  CasePrefetch() = default;
  CasePrefetch(const CasePrefetch&) = delete;
  CasePrefetch& operator=(const CasePrefetch&) = delete;

  // Starts preparing c (prepare_case) beside what is already in flight, unless its inputs would
  // take more than a small share of the host's memory, or c is started already. At most three
  // are kept (the case about to run, the one the backend runs ahead, the one after it): a fourth
  // drops the oldest. Callers start the next two cases: with a run ahead, generating a case and
  // the backend's run of the one before it (each about a second at production shapes) then go
  // beside each other and beside the judge.
  void start(const Case& c);

  // The prepared case c: the one started for it (those started before it are dropped), else
  // prepared now. The preparation's exceptions (InvalidInput) are rethrown here, as prepare_case
  // throws them. waited_s receives the seconds spent waiting for or making the inputs: the case's
  // generate time. When the backend ran c ahead (run_backends_ahead), *ahead receives that run,
  // waited for; it is dropped when `ahead` is null.
  PreparedCase take(const Case& c, double* waited_s = nullptr, std::optional<BackendAhead>* ahead = nullptr);

  // From now on, backend_free() lets b run the next started case ahead, when that case's inputs
  // and those of the case last taken (which the oracle judges meanwhile) take at most
  // max_input_bytes each (the backend's and the oracle's device memory both hold a case at once).
  // b must outlive this prefetch, and nothing else may call b.run while a run ahead is in flight:
  // the caller calls wait_for_backend() before it runs b itself outside run_case (shrink).
  // With `keep`, each such case's inputs also go to that oracle once prepared
  // (Oracle::keep_inputs_ahead, on the preparing thread), so its judge finds them there.
  void run_backends_ahead(Backend& b, double max_input_bytes, Oracle* keep = nullptr);
  // Called when the current case's backend runs are done: the first started case that is not yet
  // taken is run by the backend ahead (after its preparation), if run_backends_ahead allows it.
  void backend_free();
  // Waits until no run ahead is in flight (its result is kept for take).
  void wait_for_backend();

 private:
  struct Slot;
  struct Pending {
    std::string key;  // the JSON of the case
    std::shared_ptr<Slot> slot;
    std::shared_future<void> prepared;
    std::optional<std::shared_future<void>> ran;  // the run ahead, once queued
  };
  static constexpr size_t kMaxPending = 3;
  std::deque<Pending> pending_;
  Backend* ahead_backend_ = nullptr;
  double ahead_max_bytes_ = 0;
  Oracle* keep_oracle_ = nullptr;
  double taken_bytes_ = 0;  // inputs of the case last taken
  WorkerThread worker_;  // the preparations
  WorkerThread runner_;  // the runs ahead, which wait for their preparation. Last: gone first,
                         // dropping what it has not started, while worker_ may still prepare

};

}  // namespace dsa
