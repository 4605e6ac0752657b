#include "harness/stall_watch.hpp"

#include <chrono>

namespace dsa {

StallWatch::StallWatch(std::function<void()> check, double every_s)
    : check_(std::move(check)), every_s_(every_s), thread_([this] {
        std::unique_lock<std::mutex> lock(mu_);
        while (!cv_.wait_for(lock, std::chrono::duration<double>(every_s_), [this] { return stop_; })) {
          lock.unlock();
          check_();
          lock.lock();
        }
      }) {}

StallWatch::~StallWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

}  // namespace dsa
