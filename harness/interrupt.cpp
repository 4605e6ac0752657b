#include "harness/interrupt.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <limits>

namespace dsa::interrupt {

namespace {

std::atomic<int> g_signal{0};
std::atomic<pid_t> g_groups[kMaxGroups];
constexpr int64_t kNoDeadline = std::numeric_limits<int64_t>::max();
std::atomic<int64_t> g_deadline{kNoDeadline};  // steady-clock ticks
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<pid_t>::is_always_lock_free,
              "the handler reads these");

struct sigaction g_old_int, g_old_term;

extern "C" void on_signal(int sig) {
  // Only async-signal-safe work here: atomics, kill, _exit.
  int expected = 0;
  const bool first = g_signal.compare_exchange_strong(expected, sig);
  kill_groups();
  if (!first) _exit(exit_code(sig));  // a second signal: now
}

}  // namespace

Guard::Guard() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // the wait loops poll with short timeouts; stdio is not disturbed
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

Guard::~Guard() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  set_deadline(std::nullopt);
}

int pending() { return g_signal.load(); }

void throw_if_pending() {
  if (const int s = pending()) throw Stopped{s};
}

void add_group(pid_t pgid) {
  for (auto& g : g_groups) {
    pid_t empty = 0;
    if (g.compare_exchange_strong(empty, pgid)) return;
  }
}

void remove_group(pid_t pgid) {
  for (auto& g : g_groups) {
    pid_t mine = pgid;
    if (g.compare_exchange_strong(mine, 0)) return;
  }
}

void kill_groups() {
  for (auto& g : g_groups)
    if (const pid_t p = g.load(); p > 0) {
      kill(-p, SIGKILL);
      kill(p, SIGKILL);
    }
}

void set_deadline(std::optional<Clock::time_point> t) {
  g_deadline = t ? t->time_since_epoch().count() : kNoDeadline;
}

std::optional<Clock::time_point> deadline() {
  const int64_t d = g_deadline.load();
  if (d == kNoDeadline) return std::nullopt;
  return Clock::time_point(Clock::duration(d));
}

Clock::time_point capped(Clock::time_point t) {
  const auto d = deadline();
  return d && *d < t ? *d : t;
}

void throw_if_past_deadline() {
  const auto d = deadline();
  if (d && Clock::now() >= *d) throw Stopped{0};
}

}  // namespace dsa::interrupt
