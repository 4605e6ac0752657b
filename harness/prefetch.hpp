// The next case's inputs, prepared on another thread while the current case runs (fuzz, the
// case benchmark). At production shapes generating a case takes about a second of host time,
// which the backend's and the GPU oracle's device work can hide.
#pragma once

#include <deque>
#include <future>
#include <string>

#include "check/prepared.hpp"
#include "core/worker_thread.hpp"
#include "harness/case.hpp"

namespace dsa {

class CasePrefetch {
 public:
  CasePrefetch() = default;
  CasePrefetch(const CasePrefetch&) = delete;
  CasePrefetch& operator=(const CasePrefetch&) = delete;

  // Starts preparing c (prepare_case) beside what is already in flight, unless its inputs would
  // take more than a small share of the host's memory. At most two preparations are kept (the
  // case about to run and the one after it): a third drops the oldest.
  void start(const Case& c);

  // The prepared case c: the one started for it (those started before it are dropped), else
  // prepared now. The preparation's exceptions (InvalidInput) are rethrown here, as prepare_case
  // throws them. waited_s receives the seconds spent waiting or preparing: the case's generate time.
  PreparedCase take(const Case& c, double* waited_s = nullptr);

 private:
  struct Pending {
    std::string key;  // the JSON of the case
    std::future<PreparedCase> prepared;
  };
  std::deque<Pending> pending_;
  WorkerThread worker_;  // last: gone first, dropping what it has not started
};

}  // namespace dsa
