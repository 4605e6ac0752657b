// The last resort of a session against a case that never returns. An in-process backend or oracle
// stuck in a kernel, a collective or a lock cannot be stopped from outside (the exec backends'
// commands can: --exec-timeout), and a signal only asks the loop to stop between cases; so the
// session would hang and, killed, leave no report. A StallWatch calls the session's check on a
// thread of its own, a few times a second, until it is destroyed; the check decides whether the
// case in flight has overrun (past the hard time limit, or still running after a signal) and then
// writes the report and ends the process itself (harness/fuzz.cpp).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace dsa {

class StallWatch {
 public:
  explicit StallWatch(std::function<void()> check, double every_s = 0.25);
  ~StallWatch();  // stops calling check (waits for a call in progress)
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

 private:
  std::function<void()> check_;
  double every_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace dsa
