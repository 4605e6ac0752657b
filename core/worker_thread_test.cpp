// WorkerThread (core/worker_thread.hpp): every task on one thread that is not the caller's, in
// the order queued; results and exceptions through the futures; tasks not started when it goes are
// dropped, the running one finished.
#include "core/worker_thread.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <vector>

namespace dsa {
namespace {

TEST(WorkerThread, OneThreadInOrderWithResultsAndExceptions) {
  WorkerThread w;
  std::vector<int> order;
  std::set<std::thread::id> ids;
  std::vector<std::future<int>> results;
  for (int i = 0; i < 8; ++i)
    results.push_back(w.run([&, i] {
      order.push_back(i);
      ids.insert(std::this_thread::get_id());
      return i * i;
    }));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(results[i].get(), i * i);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
  auto bad = w.run([]() -> int { throw std::runtime_error("task"); });
  EXPECT_THROW(bad.get(), std::runtime_error);
  EXPECT_EQ(w.run([] { return 7; }).get(), 7) << "the thread outlives a task that threw";
}

TEST(WorkerThread, TasksNotStartedAreDroppedTheRunningOneFinishes) {
  std::atomic<bool> started{false}, finished{false};
  std::future<void> queued;
  {
    WorkerThread w;
    w.run([&] {
      started = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      finished = true;
    });
    while (!started) std::this_thread::yield();
    queued = w.run([] {});
  }
  EXPECT_TRUE(finished);
  EXPECT_THROW(queued.get(), std::future_error);
}

}  // namespace
}  // namespace dsa
