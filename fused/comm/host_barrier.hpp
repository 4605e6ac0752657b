// A reusable host barrier that can be broken: when one rank fails, the others stop waiting and
// throw instead of hanging in a collective forever.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>

namespace dsa::fused {

class HostBarrier {
 public:
  explicit HostBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> l(m_);
    if (broken_) throw std::runtime_error("communicator: another rank failed");
    const uint64_t gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait(l, [&] { return gen_ != gen || broken_; });
    if (gen_ == gen) throw std::runtime_error("communicator: another rank failed");
  }
  void abort() {
    std::lock_guard<std::mutex> l(m_);
    broken_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, count_ = 0;
  uint64_t gen_ = 0;
  bool broken_ = false;
};

}  // namespace dsa::fused
