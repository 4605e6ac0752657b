// Interrupts and the hard time limit of a session (fuzz, replay, repro).
//
// SIGINT and SIGTERM are caught while a session runs (Guard). The handler does only what is
// async-signal-safe: it records the signal, SIGKILLs every live child process group registered
// here (the exec backend's commands) and, on a second signal, exits at once with 128 + signal.
// Everything else happens outside it: the fuzz loop checks pending() between cases and the exec
// backend's wait loop checks it while its command runs; both stop with `Stopped`, and the session
// writes the report and JUnit of the cases done so far, marked interrupted, and exits 130 / 143.
//
// The session's hard deadline (1.5 x --time-budget) caps what a case in flight may take: the exec
// backend stops its command there (Stopped with signal 0) and the case is reported unfinished.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>

namespace dsa::interrupt {

using Clock = std::chrono::steady_clock;

// Thrown through a case that was stopped before it finished. Deliberately not a std::exception:
// run_case turns backend exceptions into crash verdicts, and a stopped case is no verdict at all.
struct Stopped {
  int signal = 0;  // SIGINT / SIGTERM; 0: the session's hard deadline passed
};

// Installs the SIGINT/SIGTERM handlers for its lifetime (restoring the previous ones after) and
// clears any pending signal. Not nested.
class Guard {
 public:
  Guard();
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
};

// The first signal received since the Guard was made (SIGINT or SIGTERM), 0 when none.
int pending();
// Throws Stopped{pending()} when a signal is pending.
void throw_if_pending();
// The exit code of a session stopped by signal sig: 128 + sig (130 SIGINT, 143 SIGTERM).
inline int exit_code(int sig) { return 128 + sig; }

// Live child process groups (their leader's pid): SIGKILLed by the handler, so that an interrupt
// leaves no process of a backend behind. At most kMaxGroups at once (more are not registered).
inline constexpr int kMaxGroups = 64;
void add_group(pid_t pgid);
void remove_group(pid_t pgid);
void kill_groups();  // async-signal-safe
// Registers a group for its scope.
struct ChildGroup {
  pid_t pgid;
  explicit ChildGroup(pid_t g) : pgid(g) { add_group(g); }
  ~ChildGroup() { remove_group(pgid); }
  ChildGroup(const ChildGroup&) = delete;
  ChildGroup& operator=(const ChildGroup&) = delete;
};

// The session's hard deadline (nullopt: none). Set by the session, read by backends.
void set_deadline(std::optional<Clock::time_point> t);
std::optional<Clock::time_point> deadline();
// The earlier of t and the session's deadline.
Clock::time_point capped(Clock::time_point t);
// Throws Stopped{0} when the session's deadline has passed (call it where a case's own time limit
// fired: when the cap was the session's, the case is unfinished, not a timeout of the backend).
void throw_if_past_deadline();

}  // namespace dsa::interrupt
