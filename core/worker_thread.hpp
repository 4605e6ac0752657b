// One long-lived thread that runs tasks one at a time, in order. For work that goes beside the
// main thread case after case (the next case's inputs, the bf16 oracle side): a thread per case
// would also make per-thread state per case (an OpenMP team, a GPU oracle's cuBLAS handle, which
// is kept for its thread's life).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>

namespace dsa {

class WorkerThread {
 public:
  WorkerThread();
  // Tasks not started yet are dropped (their futures report a broken promise); the running one
  // finishes first.
  ~WorkerThread();
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  // Queues f; the future holds its result or exception.
  template <class F>
  auto run(F f) -> std::future<std::invoke_result_t<F>> {
    using R = std::invoke_result_t<F>;
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(f));
    std::future<R> done = task->get_future();
    post([task] { (*task)(); });
    return done;
  }

 private:
  void post(std::function<void()> f);
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace dsa
