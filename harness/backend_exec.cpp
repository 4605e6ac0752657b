// The `exec:CMD` backend: any external implementation, through the folder protocol of
// harness/exec_protocol.hpp. The command runs through /bin/sh in its own process group, with a
// time limit; its stderr is kept for the failure message.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "harness/backend.hpp"
#include "harness/exec_protocol.hpp"

namespace dsa {

namespace {

namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string tail_of(const std::string& path, size_t max_chars = 4000) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.size() > max_chars) s = "..." + s.substr(s.size() - max_chars);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s.empty() ? "(empty)" : s;
}

// A fresh folder under $TMPDIR (or /tmp), removed on scope exit unless DSA_KEEP_EXEC_DIR is set.
struct TempFolder {
  std::string path;
  TempFolder() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/dsa-exec-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("exec: cannot create a folder under " + tmpl);
    path = tmpl;
  }
  ~TempFolder() {
    if (std::getenv("DSA_KEEP_EXEC_DIR")) return;
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct Exit {
  bool timed_out = false;
  int status = 0;
};

// Runs `sh -c LINE` with stdout and stderr redirected to files; kills its whole process group
// when the time limit passes.
Exit run_shell(const std::string& line, const std::string& out_path, const std::string& err_path, double timeout_s) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("exec: fork failed");
  if (pid == 0) {  // only async-signal-safe calls until exec
    setpgid(0, 0);
    const int o = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int n = open("/dev/null", O_RDONLY);
    if (o < 0 || e < 0 || n < 0) _exit(126);
    dup2(n, 0);
    dup2(o, 1);
    dup2(e, 2);
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so the group exists before any kill
  const auto t0 = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(200);
  Exit ex;
  for (;;) {
    const pid_t r = waitpid(pid, &ex.status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) throw std::runtime_error("exec: waitpid failed");
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &ex.status, 0) < 0 && errno == EINTR) {
      }
      ex.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
  return ex;
}

class ExecBackend final : public Backend {
 public:
  ExecBackend(std::string command, double timeout_s) : command_(std::move(command)), timeout_s_(timeout_s) {}

  std::string name() const override { return "exec:" + command_; }

  BackendRun run(const Case& c, const PreparedCase& pc) override {
    const Inputs& in = pc.inputs;
    const std::optional<TensorI>& injected = pc.injected;
    TempFolder dir;
    exec::write_inputs(dir.path, c, in, injected);
    const std::string line = command_ + " " + shell_quote(dir.path);
    const std::string err = dir.path + "/.stderr", out = dir.path + "/.stdout";
    const auto t0 = std::chrono::steady_clock::now();
    const Exit ex = run_shell(line, out, err, timeout_s_);
    BackendRun r;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto failure = [&](const std::string& what) {
      return std::runtime_error("exec: `" + line + "` " + what + "; stderr (tail): " + tail_of(err));
    };
    if (ex.timed_out) {
      std::ostringstream s;
      s << "timed out after " << timeout_s_ << " s";
      throw failure(s.str());
    }
    if (WIFSIGNALED(ex.status)) throw failure("was killed by signal " + std::to_string(WTERMSIG(ex.status)));
    if (const int code = WEXITSTATUS(ex.status); code != 0) {
      // The shell reports a child killed by signal N as 128 + N.
      const std::string sig = code > 128 && code < 128 + 65 ? " (the shell's code for signal " + std::to_string(code - 128) + ")" : "";
      throw failure("exited with status " + std::to_string(code) + sig);
    }
    try {
      r.result = exec::read_outputs(dir.path + "/outputs.safetensors", c);
    } catch (const std::exception& e) {
      throw failure(std::string("wrote a bad outputs file: ") + e.what());
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
