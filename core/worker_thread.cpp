#include "core/worker_thread.hpp"

namespace dsa {

WorkerThread::WorkerThread() : thread_([this] { loop(); }) {}

WorkerThread::~WorkerThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    tasks_.clear();
  }
  cv_.notify_one();
  thread_.join();
}

void WorkerThread::post(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(f));
  }
  cv_.notify_one();
}

void WorkerThread::loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace dsa
