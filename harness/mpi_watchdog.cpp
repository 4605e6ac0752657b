#include "harness/mpi_watchdog.hpp"

#include <poll.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

namespace dsa::mpi {

namespace {

// What the process-wide hooks share with the thread. The first notice claims g_notice; a signal
// handler writes it and one byte to the pipe, nothing else that is not async-signal-safe.
struct Notice {
  int kind = 0;   // 1 fatal signal, 2 exit(), 3 exception
  int value = 0;  // the signal, the exit status
  int64_t seq = -1;
  char what[480] = {0};
};
Notice g_notice;
std::atomic<int> g_claimed{0};
std::atomic<bool> g_active{false};
std::atomic<int64_t> g_seq{-1};
int g_pipe[2] = {-1, -1};
double g_grace_s = 60;

constexpr int kFatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "a signal";
  }
}

// Sleeps (async-signal-safe) until rank 0 has aborted the job, at most the grace period.
void wait_for_rank0() {
  const timespec step{0, 10 * 1000 * 1000};
  for (double waited = 0; waited < g_grace_s; waited += 0.01) nanosleep(&step, nullptr);
}

// Claims the notice for the first crash; false when one is already claimed or the run has ended.
bool claim(int kind, int value) {
  if (!g_active.load() || g_claimed.exchange(1) != 0) return false;
  g_notice.kind = kind;
  g_notice.value = value;
  g_notice.seq = g_seq.load();
  const char b = 1;
  (void)!write(g_pipe[1], &b, 1);
  return true;
}

void on_fatal_signal(int sig) {
  if (claim(1, sig)) wait_for_rank0();
  // Die as the signal would have: SA_RESETHAND restored the default action, SA_NODEFER lets it in.
  std::raise(sig);
}

void on_exit_hook(int status, void*) {
  if (claim(2, status)) wait_for_rank0();
}

}  // namespace

RankWatchdog::RankWatchdog(Channel& ch, double rank_timeout_s)
    : ch_(ch), backstop_s_(2 * rank_timeout_s + 30) {
  g_grace_s = rank_timeout_s + 10;
  if (pipe(g_pipe) != 0) std::perror("dsa-parity: pipe");
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sa.sa_flags = SA_RESETHAND | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int sig : kFatal) sigaction(sig, &sa, nullptr);  // replaces MPI's own (a backtrace, then death)
  static bool registered = false;  // on_exit cannot be undone: register once, switched by g_active
  if (!registered) on_exit(on_exit_hook, nullptr);
  registered = true;
  g_active = true;
  thread_ = std::thread([this] { loop(); });
}

RankWatchdog::~RankWatchdog() {
  g_active = false;
  stop_ = true;
  thread_.join();
  for (int sig : kFatal) std::signal(sig, SIG_DFL);
  close(g_pipe[0]);
  close(g_pipe[1]);
}

void RankWatchdog::arm(int64_t seq) {
  g_seq = seq;
  armed_at_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
  armed_seq_ = seq;
}

void RankWatchdog::disarm() { armed_seq_ = -1; }

void RankWatchdog::report_error(int64_t seq, const std::string& what) {
  if (!g_active.load() || g_claimed.exchange(1) != 0) return;
  g_notice.kind = 3;
  g_notice.seq = seq;
  std::snprintf(g_notice.what, sizeof g_notice.what, "%s", what.c_str());
  const char b = 1;
  (void)!write(g_pipe[1], &b, 1);
}

void RankWatchdog::send_notice() {
  const Notice& n = g_notice;
  std::string what;
  if (n.kind == 1)
    what = std::string("killed by ") + signal_name(n.value) + " (signal " + std::to_string(n.value) + ")";
  else if (n.kind == 2)
    what = "exit(" + std::to_string(n.value) + ") before the run ended";
  else
    what = std::string("error: ") + n.what;
  const nlohmann::json j = {{"rank", ch_.rank()}, {"seq", n.seq}, {"how", n.kind == 3 ? "error" : "crash"}, {"what", what}};
  ch_.send(0, Tag::fault, j.dump());
}

void RankWatchdog::loop() {
  while (!stop_) {
    pollfd p{g_pipe[0], POLLIN, 0};
    if (poll(&p, 1, 100) > 0 && (p.revents & POLLIN)) {
      char b;
      (void)!read(g_pipe[0], &b, 1);
      try {
        send_notice();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "dsa-parity rank %d: could not tell rank 0 of the fault: %s\n", ch_.rank(), e.what());
      }
    }
    const int64_t seq = armed_seq_.load();
    if (seq < 0) continue;
    const double ran =
        (std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count() - armed_at_ms_) /
        1000.0;
    if (ran > backstop_s_) {
      std::fprintf(stderr,
                   "dsa-parity rank %d: case %lld has run %.0f s, past its backstop (twice --rank-timeout and 30 s), "
                   "and rank 0 has not ended the job: aborting it\n",
                   ch_.rank(), (long long)seq, ran);
      std::fflush(stderr);
      release_before_abort();
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
}

namespace {

std::mutex g_release_mutex;
std::function<void()> g_release;

}  // namespace

BeforeAbort::BeforeAbort(std::function<void()> release) {
  std::lock_guard<std::mutex> lock(g_release_mutex);
  g_release = std::move(release);
}

BeforeAbort::~BeforeAbort() {
  std::lock_guard<std::mutex> lock(g_release_mutex);
  g_release = nullptr;
}

void release_before_abort() {
  std::function<void()> release;
  {
    std::lock_guard<std::mutex> lock(g_release_mutex);
    release = std::exchange(g_release, nullptr);  // once
  }
  if (!release) return;
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([release, done] {
    try {
      release();
    } catch (...) {
    }
    *done = true;
  }).detach();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!*done && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace dsa::mpi
