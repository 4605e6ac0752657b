// The thread the bf16 side of a case runs on beside the exact side (judge, where the oracle allows
// it): one for the process (core/worker_thread.hpp says why not one per case).
#pragma once

#include <functional>
#include <future>

namespace dsa {

// Runs f on the side thread, after the tasks queued before it. The future holds f's exception.
std::future<void> run_on_side_thread(std::function<void()> f);

}  // namespace dsa
