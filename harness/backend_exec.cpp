// The `exec:CMD` backend: any external implementation, through the folder protocol of
// harness/exec_protocol.hpp. The command runs through /bin/sh in its own process group, with a
// time limit that covers reading its outputs too; the group is killed when the limit passes and
// when the command exits. The tail of its stdout and stderr is kept for the failure message.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "harness/backend.hpp"
#include "harness/exec_process.hpp"
#include "harness/exec_protocol.hpp"
#include "harness/interrupt.hpp"
#include "harness/text.hpp"

namespace dsa {

namespace {

namespace fs = std::filesystem;

using exec::Captured;
using exec::shell_quote;
using exec::TempFolder;

struct Exit {
  bool timed_out = false;
  int status = 0;
};

// Reads what is available on fd within wait_ms; false at end of file.
bool pump(int fd, Captured& cap, int wait_ms) {
  pollfd p{fd, POLLIN, 0};
  const int r = poll(&p, 1, wait_ms);
  if (r <= 0) return true;
  char buf[1 << 16];
  const ssize_t n = read(fd, buf, sizeof buf);
  if (n > 0) {
    cap.add(buf, size_t(n));
    return true;
  }
  return n < 0 && (errno == EINTR || errno == EAGAIN);
}

// Runs `sh -c LINE` in a process group of its own, stdout and stderr into one pipe. When the time
// limit passes, and also when the shell exits (a backend may leave children behind), its whole
// process group is killed: nothing it started outlives the run.
Exit run_shell(const std::string& line, Captured& cap, std::chrono::steady_clock::time_point deadline) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("exec: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error("exec: fork failed");
  }
  if (pid == 0) {  // only async-signal-safe calls until exec
    setpgid(0, 0);
    const int n = open("/dev/null", O_RDONLY);
    if (n < 0) _exit(126);
    dup2(n, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so the group exists before any kill
  // Registered for the signal path (harness/interrupt.hpp): SIGINT/SIGTERM kill the group at once.
  const interrupt::ChildGroup group(pid);
  close(fds[1]);
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  Exit ex;
  bool open_pipe = true;
  for (;;) {
    const pid_t r = waitpid(pid, &ex.status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      kill(-pid, SIGKILL);
      close(fds[0]);
      throw std::runtime_error("exec: waitpid failed");
    }
    if (const int sig = interrupt::pending()) {  // interrupted: nothing of the command survives the run
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &ex.status, 0) < 0 && errno == EINTR) {
      }
      close(fds[0]);
      throw interrupt::Stopped{sig};
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &ex.status, 0) < 0 && errno == EINTR) {
      }
      ex.timed_out = true;
      break;
    }
    const int wait_ms = int(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count(), 1, 20));
    if (open_pipe)
      open_pipe = pump(fds[0], cap, wait_ms);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  }
  // The shell is gone; whatever it left running in its group goes too.
  kill(-pid, SIGKILL);
  if (const int sig = interrupt::pending()) {  // the signal path killed it: no verdict of the command
    close(fds[0]);
    throw interrupt::Stopped{sig};
  }
  // Drain what is left; a process that escaped the group (setsid) and keeps the pipe open is not
  // waited for beyond a short grace.
  const auto grace = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (open_pipe && std::chrono::steady_clock::now() < grace) open_pipe = pump(fds[0], cap, 20);
  close(fds[0]);
  return ex;
}

class ExecBackend final : public Backend {
 public:
  ExecBackend(std::string command, double timeout_s) : command_(std::move(command)), timeout_s_(timeout_s) {}

  std::string name() const override { return "exec:" + command_; }
  // One process per case, no handshake: nothing is declared, so --repeat checks spreads only.
  std::vector<std::string> deterministic() const override { return {}; }

  BackendRun run(const Case& c, const PreparedCase& pc) override {
    const Inputs& in = pc.inputs;
    const std::optional<TensorI>& injected = pc.injected;
    TempFolder dir;
    exec::write_inputs(dir.path, c, in, injected);
    const std::string line = command_ + " " + shell_quote(dir.path);
    const auto t0 = std::chrono::steady_clock::now();
    // One time limit for the command and for reading what it wrote.
    // Capped by the session's hard time limit (1.5 x --time-budget), where the case is unfinished.
    const auto deadline = interrupt::capped(t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                     std::chrono::duration<double>(std::min(timeout_s_, 1e9))));
    Captured cap;
    const Exit ex = run_shell(line, cap, deadline);
    BackendRun r;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Everything from outside (the command line, its output) is made valid UTF-8 and capped here:
    // the message goes to the terminal, the JSON report and JUnit XML.
    auto failure = [&](const std::string& what) {
      return std::runtime_error(text::safe("exec: `" + text::safe(line, 1000) + "` " + what +
                                               "; stderr (tail): " + cap.text(),
                                           8000));
    };
    std::ostringstream limit;
    limit << "timed out after " << timeout_s_ << " s";
    if (ex.timed_out) {
      interrupt::throw_if_past_deadline();
      throw failure(limit.str());
    }
    if (WIFSIGNALED(ex.status)) throw failure("was killed by signal " + std::to_string(WTERMSIG(ex.status)));
    if (const int code = WEXITSTATUS(ex.status); code != 0) {
      // The shell reports a child killed by signal N as 128 + N.
      const std::string sig = code > 128 && code < 128 + 65 ? " (the shell's code for signal " + std::to_string(code - 128) + ")" : "";
      throw failure("exited with status " + std::to_string(code) + sig);
    }
    try {
      r.result = exec::read_outputs(dir.path + "/outputs.safetensors", c, deadline);
    } catch (const std::exception& e) {
      const std::string why = e.what();
      if (why.find("timed out while reading") != std::string::npos) {
        interrupt::throw_if_past_deadline();
        throw failure(limit.str() + " (while reading its outputs)");
      }
      throw failure(std::string("wrote a bad outputs file: ") + text::safe(why, 2000));
    }
    return r;
  }

 private:
  std::string command_;
  double timeout_s_;
};

}  // namespace

std::unique_ptr<Backend> make_exec_backend(const std::string& command, const BackendOptions& opt) {
  return std::make_unique<ExecBackend>(command, opt.exec_timeout_s);
}

}  // namespace dsa
