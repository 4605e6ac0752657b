// The `exec2:CMD` backend, protocol v2 (README "External backends"): one persistent worker per
// session, started through /bin/sh in its own process group, talked to with one JSON object per
// line: the harness writes requests to the worker's stdin, the worker answers on its stdout (its
// stderr is kept, capped, for failure messages). Per case the harness writes the v1 folder
// (case.json, layout.json, inputs.safetensors) under the session folder and sends its path.
//
//   harness → {"type":"hello","protocol":2,"session":DIR,"catalogue":DIR/catalogue.json}
//   worker  → {"type":"capabilities","protocol":2,"name":..,"stages":[..],"dtypes":[..],
//              "cp":bool,"max_tokens":N,"paths":[..]; optional "deterministic":[..],
//              "layouts":["zigzag"|"contiguous",..], "pad_rows":["attend"|"masked",..]}
//   harness → {"type":"run","id":N,"folder":DIR/case-N}
//   worker  → {"type":"done","id":N} | {"type":"cannot_run","id":N,"reason":..}
//             | {"type":"error","id":N,"message":..}
//   harness → {"type":"bye"}, then closes the worker's stdin
//
// A case outside the capabilities is cannot-run without being sent. A worker that dies, writes
// anything but the expected answer on stdout, or runs past the time limit fails that case (crash
// or timeout) and is killed with its group; the next case starts a fresh worker.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/errors.hpp"
#include "core/layout.hpp"
#include "harness/backend.hpp"
#include "harness/exec_process.hpp"
#include "harness/interrupt.hpp"
#include "harness/exec_protocol.hpp"
#include "harness/text.hpp"

namespace dsa {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

// The longest line the worker may write: anything longer is garbage.
constexpr size_t kMaxLine = 1 << 20;

const std::vector<std::string>& known_dtypes() {
  static const std::vector<std::string> d = {"F32", "BF16", "F16", "F64", "I32", "I64"};
  return d;
}

struct Capabilities {
  std::string name;
  std::vector<Stage> stages;
  std::vector<std::string> dtypes;
  bool cp = false;
  int64_t max_tokens = 0;
  std::vector<Path> paths;
  std::vector<std::string> deterministic;  // optional: result tensors it promises bitwise reproducible
  std::vector<Layout> layouts = {Layout::zigzag, Layout::contiguous};  // optional: the CP layouts it takes
  std::vector<PadRows> pad_rows = {PadRows::attend, PadRows::masked};  // optional: the pad-row modes it takes
};

// An optional list of names under `key` ("layouts": ["zigzag"]): absent, every value; present, a
// non-empty list of known names without repeats.
template <class T>
std::vector<T> parse_name_list(const json& j, const char* key, std::vector<T> all, T (*parse)(const std::string&, const std::string&),
                               const std::function<std::runtime_error(const std::string&)>& bad) {
  if (!j.contains(key)) return all;
  std::string names;
  for (T v : all) names += (names.empty() ? "" : "|") + std::string(name(v));
  if (!j[key].is_array() || j[key].empty()) throw bad(std::string(key) + " must be a non-empty list of " + names);
  std::vector<T> out;
  for (const json& n : j[key]) {
    T v;
    try {
      v = parse(n.is_string() ? n.get<std::string>() : n.dump(), key);
    } catch (const std::exception&) {
      throw bad(std::string("unknown ") + key + " entry " + n.dump() + " (one of " + names + ")");
    }
    if (std::find(out.begin(), out.end(), v) != out.end()) throw bad(std::string(key) + " names " + n.dump() + " twice");
    out.push_back(v);
  }
  return out;
}

// Parses the worker's capabilities line; std::runtime_error says what is wrong.
Capabilities parse_capabilities(const std::string& line) {
  json j;
  try {
    j = json::parse(line);
  } catch (const std::exception&) {
    throw std::runtime_error("answered the hello with a line that is not JSON: " + text::safe(line, 300));
  }
  auto bad = [&](const std::string& why) {
    return std::runtime_error("sent bad capabilities (" + why + "): " + text::safe(line, 300));
  };
  if (!j.is_object() || j.value("type", json()) != "capabilities") throw bad("type must be \"capabilities\"");
  if (!j.contains("protocol") || j["protocol"] != 2) throw bad("protocol must be 2");
  Capabilities c;
  if (j.contains("name") && j["name"].is_string()) c.name = j["name"].get<std::string>();
  if (!j.contains("stages") || !j["stages"].is_array() || j["stages"].empty())
    throw bad("stages must be a non-empty list");
  for (const json& s : j["stages"]) {
    const auto st = s.is_string() ? parse_stage(s.get<std::string>()) : std::nullopt;
    if (!st) throw bad("unknown stage " + s.dump());
    c.stages.push_back(*st);
  }
  if (!j.contains("paths") || !j["paths"].is_array() || j["paths"].empty())
    throw bad("paths must be a non-empty list of absorbed|explicit");
  for (const json& p : j["paths"]) {
    if (p == "absorbed")
      c.paths.push_back(Path::absorbed);
    else if (p == "explicit")
      c.paths.push_back(Path::explicit_);
    else
      throw bad("unknown path " + p.dump());
  }
  if (!j.contains("dtypes") || !j["dtypes"].is_array() || j["dtypes"].empty())
    throw bad("dtypes must be a non-empty list of F32|BF16|F16|F64|I32|I64");
  for (const json& d : j["dtypes"]) {
    if (!d.is_string() ||
        std::find(known_dtypes().begin(), known_dtypes().end(), d.get<std::string>()) == known_dtypes().end())
      throw bad("unknown dtype " + d.dump());
    c.dtypes.push_back(d.get<std::string>());
  }
  if (j.contains("deterministic")) {
    if (!j["deterministic"].is_array()) throw bad("deterministic must be a list of result tensor names");
    for (const json& n : j["deterministic"]) {
      const TensorSpec* s = n.is_string() ? find_tensor(n.get<std::string>()) : nullptr;
      if (!s || !s->is_result()) throw bad("deterministic names " + n.dump() + ", which is not a result tensor");
      c.deterministic.push_back(n.get<std::string>());
    }
  }
  if (!j.contains("cp") || !j["cp"].is_boolean()) throw bad("cp must be true or false");
  c.cp = j["cp"].get<bool>();
  if (!j.contains("max_tokens") || !j["max_tokens"].is_number_integer() || j["max_tokens"].get<int64_t>() < 1)
    throw bad("max_tokens must be a positive integer");
  c.max_tokens = j["max_tokens"].get<int64_t>();
  c.layouts = parse_name_list<Layout>(j, "layouts", c.layouts, parse_layout, bad);
  c.pad_rows = parse_name_list<PadRows>(j, "pad_rows", c.pad_rows, parse_pad_rows, bad);
  return c;
}

// The worker process: stdin is one end of a socket pair (so that a write to a dead worker is an
// error, never a SIGPIPE), stdout and stderr are pipes.
class Worker {
 public:
  explicit Worker(const std::string& command) {
    int in[2], out[2], err[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) throw std::runtime_error("exec2: socketpair failed");
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("exec2: pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("exec2: fork failed");
    if (pid_ == 0) {  // only async-signal-safe calls until exec
      setpgid(0, 0);
      dup2(in[1], 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    setpgid(pid_, pid_);
    interrupt::add_group(pid_);  // SIGINT/SIGTERM kill the worker's group at once (harness/interrupt.hpp)
    close(in[1]);
    close(out[1]);
    close(err[1]);
    in_ = in[0];
    out_ = out[0];
    err_ = err[0];
    fcntl(out_, F_SETFL, fcntl(out_, F_GETFL) | O_NONBLOCK);
    fcntl(err_, F_SETFL, fcntl(err_, F_GETFL) | O_NONBLOCK);
    fcntl(in_, F_SETFL, fcntl(in_, F_GETFL) | O_NONBLOCK);
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() { stop(false); }

  // Ends the worker: politely (bye, stdin closed, a short grace to exit) or not; then its whole
  // process group is killed and the worker reaped.
  void stop(bool polite) {
    if (pid_ <= 0) return;
    if (polite && in_ >= 0) {
      send("{\"type\":\"bye\"}\n", Clock::now() + std::chrono::milliseconds(100));
      close(in_);
      in_ = -1;
      const auto grace = Clock::now() + std::chrono::milliseconds(500);
      while (Clock::now() < grace && !exited()) drain(10);
    }
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    interrupt::remove_group(pid_);
    if (status_ < 0) {
      int st = 0;
      while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
      status_ = st;
    }
    pid_ = -1;
    for (int* fd : {&in_, &out_, &err_})
      if (*fd >= 0) {
        close(*fd);
        *fd = -1;
      }
  }

  // Writes all of `s` by the deadline; false when the worker is gone or the deadline passed.
  bool send(const std::string& s, Clock::time_point deadline) {
    size_t done = 0;
    while (done < s.size()) {
      const ssize_t n = ::send(in_, s.data() + done, s.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += size_t(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
      if (Clock::now() >= deadline) return false;
      pollfd p{in_, POLLOUT, 0};
      poll(&p, 1, 10);
      drain(0);
    }
    return true;
  }

  enum class Read { line, eof, timeout, too_long };
  // One line of stdout (without its newline) by the deadline; stderr is drained meanwhile.
  Read read_line(std::string& line, Clock::time_point deadline) {
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return Read::line;
      }
      if (buf_.size() > kMaxLine) {
        line = buf_.substr(0, 300);
        return Read::too_long;
      }
      if (eof_) {
        line = buf_;
        return Read::eof;
      }
      if (const int sig = interrupt::pending()) throw interrupt::Stopped{sig};  // the worker is killed already
      const auto now = Clock::now();
      if (now >= deadline) return Read::timeout;
      const int wait_ms = int(std::clamp<int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count(), 1, 50));
      pollfd p[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
      poll(p, err_ >= 0 ? 2 : 1, wait_ms);
      read_out();
      drain(0);
    }
  }

  // Whether the worker has exited (reaps it).
  bool exited() {
    if (status_ >= 0) return true;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      status_ = st;
      return true;
    }
    return false;
  }
  // "exited with status N", "was killed by signal N" or "" while it runs.
  std::string how_it_ended() {
    const auto until = Clock::now() + std::chrono::milliseconds(200);
    while (!exited() && Clock::now() < until) drain(10);
    if (!exited()) return "";
    if (WIFSIGNALED(status_)) return "was killed by signal " + std::to_string(WTERMSIG(status_));
    return "exited with status " + std::to_string(WEXITSTATUS(status_));
  }

  const exec::Captured& stderr_tail() const { return err_tail_; }
  void clear_stderr() { err_tail_ = exec::Captured(); }

 private:
  void read_out() {
    char b[1 << 16];
    for (;;) {
      const ssize_t n = read(out_, b, sizeof b);
      if (n > 0) {
        buf_.append(b, size_t(n));
        if (buf_.size() > 2 * kMaxLine) return;
        continue;
      }
      if (n == 0) eof_ = true;
      return;
    }
  }
  void drain(int wait_ms) {
    if (err_ < 0) {
      if (wait_ms) std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
      return;
    }
    if (wait_ms) {
      pollfd p{err_, POLLIN, 0};
      poll(&p, 1, wait_ms);
    }
    char b[1 << 16];
    for (;;) {
      const ssize_t n = read(err_, b, sizeof b);
      if (n > 0) {
        err_tail_.add(b, size_t(n));
        continue;
      }
      if (n == 0) {
        close(err_);
        err_ = -1;
      }
      return;
    }
  }

  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  int status_ = -1;
  bool eof_ = false;
  std::string buf_;
  exec::Captured err_tail_;
};

class Exec2Backend final : public Backend {
 public:
  Exec2Backend(std::string command, double timeout_s)
      : command_(std::move(command)), timeout_s_(timeout_s), session_("dsa-exec2") {
    {
      std::ofstream o(session_.path + "/catalogue.json");
      o << exec::catalogue_json();
    }
    try {
      start(deadline());
    } catch (const std::exception& e) {
      throw Unavailable(e.what());
    }
  }
  ~Exec2Backend() override {
    if (worker_) worker_->stop(true);
  }

  std::string name() const override { return "exec2:" + command_; }
  std::vector<Path> paths() const override { return caps_.paths; }
  std::vector<Stage> stages() const override { return caps_.stages; }
  std::vector<std::string> deterministic() const override { return caps_.deterministic; }
  DrawLimits draw_limits() const override {
    DrawLimits l;
    l.paths = caps_.paths;
    l.max_cp = caps_.cp ? 0 : 1;
    l.layouts = caps_.layouts;
    l.pad_rows = caps_.pad_rows;
    l.max_tokens = caps_.max_tokens;
    return l;
  }

  BackendRun run(const Case& c, const PreparedCase& pc) override {
    // Outside the capabilities: cannot-run, never sent.
    const std::string who = "exec2 worker " + (caps_.name.empty() ? text::quoted(command_) : caps_.name);
    if (std::find(caps_.paths.begin(), caps_.paths.end(), c.problem.path) == caps_.paths.end())
      throw Unavailable(who + " does not implement path " + dsa::name(c.problem.path));
    if (pc.layout.cp > 1 && !caps_.cp)
      throw Unavailable(who + " does not support cp > 1 (case cp " + std::to_string(pc.layout.cp) + ")");
    if (pc.layout.tp > caps_.max_tokens)
      throw Unavailable(who + " takes at most " + std::to_string(caps_.max_tokens) + " tokens (case Tp " +
                        std::to_string(pc.layout.tp) + ")");
    if (const std::string why = outside(c, draw_limits()); !why.empty())
      throw Unavailable(who + " does not take this case: " + why + " (its capabilities)");
    bool any = false;
    for (Stage s : c.stages) any |= std::find(caps_.stages.begin(), caps_.stages.end(), s) != caps_.stages.end();
    if (!any) throw Unavailable(who + " implements none of the case's stages");

    const auto t0 = Clock::now();
    const Clock::time_point limit = interrupt::capped(deadline());  // the session's hard deadline too
    if (!worker_) start(limit);  // a restart after a crash; failing it fails this case
    worker_->clear_stderr();
    const int64_t id = ++cases_;
    const std::string folder = session_.path + "/case-" + std::to_string(id);
    struct Cleanup {
      std::string f;
      ~Cleanup() {
        if (!std::getenv("DSA_KEEP_EXEC_DIR")) exec::remove_tree(f);
      }
    } cleanup{folder};
    std::filesystem::create_directories(folder);
    exec::write_inputs(folder, c, pc.inputs, pc.injected);

    const std::string req = json{{"type", "run"}, {"id", id}, {"folder", folder}}.dump() + "\n";
    if (!worker_->send(req, limit)) fail_and_stop("did not take the request (" + ended() + ")");
    std::string line;
    switch (worker_->read_line(line, limit)) {
      case Worker::Read::line: break;
      case Worker::Read::timeout:
        interrupt::throw_if_past_deadline();  // the session's cap, not the worker's: unfinished
        fail_and_stop(timed_out());
      case Worker::Read::too_long: fail_and_stop("wrote garbage on stdout (a line over 1 MiB): " + text::safe(line, 300));
      case Worker::Read::eof: {
        const std::string how = worker_->how_it_ended();
        fail_and_stop("died during the case (" + (how.empty() ? "closed its stdout" : how) + ")" +
                      (line.empty() ? "" : "; unfinished stdout: " + text::safe(line, 300)));
      }
    }
    json a;
    try {
      a = json::parse(line);
    } catch (const std::exception&) {
      fail_and_stop("wrote garbage on stdout (not a JSON line): " + text::safe(line, 300));
    }
    if (!a.is_object() || !a.contains("type") || !a["type"].is_string() || !a.contains("id") || a["id"] != id)
      fail_and_stop("wrote garbage on stdout (not an answer to request " + std::to_string(id) +
                    "): " + text::safe(line, 300));
    const std::string type = a["type"].get<std::string>();
    auto field = [&](const char* k) {
      return a.contains(k) && a[k].is_string() ? text::safe(a[k].get<std::string>(), 2000) : std::string("(no reason)");
    };
    if (type == "cannot_run") throw Unavailable(who + " cannot run this case: " + field("reason"));
    if (type == "error") throw failure("reported an error: " + field("message"));
    if (type != "done") fail_and_stop("wrote garbage on stdout (unknown answer type " + text::quoted(type) + ")");

    BackendRun r;
    try {
      r.result = exec::read_outputs(folder + "/outputs.safetensors", c, limit);
      check_dtypes(folder + "/outputs.safetensors");
    } catch (const std::exception& e) {
      const std::string why = e.what();
      if (why.find("timed out while reading") != std::string::npos)
        throw failure(timed_out() + " (while reading its outputs)");
      throw failure("wrote a bad outputs file: " + text::safe(why, 2000));
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
  }

 private:
  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(std::min(timeout_s_, 1e9)));
  }
  std::string timed_out() const {
    std::ostringstream o;
    o << "timed out after " << timeout_s_ << " s";
    return o.str();
  }
  std::string ended() { return worker_ ? worker_->how_it_ended() : std::string(); }

  std::runtime_error failure(const std::string& what) const {
    const std::string tail = worker_ ? worker_->stderr_tail().text() : std::string("(empty)");
    return std::runtime_error(
        text::safe("exec2: `" + text::safe(command_, 1000) + "` " + what + "; stderr (tail): " + tail, 8000));
  }
  // The worker is no longer trusted: the case fails, the worker is killed, the next case restarts it.
  [[noreturn]] void fail_and_stop(const std::string& what) {
    std::runtime_error e = failure(what);
    worker_->stop(false);
    worker_.reset();
    throw e;
  }

  // The handshake: hello, then the capabilities line, by the deadline.
  void start(Clock::time_point limit) {
    worker_ = std::make_unique<Worker>(command_);
    const std::string hello = json{{"type", "hello"},
                                   {"protocol", 2},
                                   {"session", session_.path},
                                   {"catalogue", session_.path + "/catalogue.json"}}
                                  .dump() +
                              "\n";
    std::string line;
    std::string why;
    if (!worker_->send(hello, limit)) {
      why = "did not take the hello (" + ended() + ")";
    } else {
      switch (worker_->read_line(line, limit)) {
        case Worker::Read::line:
          try {
            Capabilities c = parse_capabilities(line);
            if (started_ && (c.paths != caps_.paths || c.stages != caps_.stages))
              throw std::runtime_error("restarted with other paths or stages than the session began with");
            caps_ = std::move(c);
            started_ = true;
            return;
          } catch (const std::exception& e) {
            why = e.what();
          }
          break;
        case Worker::Read::timeout: why = timed_out() + " before its capabilities"; break;
        case Worker::Read::too_long: why = "answered the hello with a line over 1 MiB"; break;
        case Worker::Read::eof: {
          const std::string how = worker_->how_it_ended();
          why = "ended before its capabilities (" + (how.empty() ? "closed its stdout" : how) + ")";
        }
      }
    }
    fail_and_stop("failed the handshake: " + why);
  }

  // Every tensor's dtype must be one the worker declared (the file has passed read_outputs).
  void check_dtypes(const std::string& path) const {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return;  // read_outputs says what is wrong
    std::string head;
    try {
      std::ifstream in(path, std::ios::binary);
      char len[8];
      if (!in.read(len, 8)) return;
      uint64_t n = 0;
      for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(len[i]);
      if (n > (uint64_t(100) << 20)) return;
      head.resize(n);
      if (!in.read(head.data(), std::streamsize(n))) return;
      const json h = json::parse(head);
      for (auto it = h.begin(); it != h.end(); ++it) {
        if (it.key() == "__metadata__" || !it->is_object() || !it->contains("dtype") || !(*it)["dtype"].is_string())
          continue;
        const std::string d = (*it)["dtype"].get<std::string>();
        if (std::find(caps_.dtypes.begin(), caps_.dtypes.end(), d) == caps_.dtypes.end() &&
            std::find(known_dtypes().begin(), known_dtypes().end(), d) != known_dtypes().end())
          throw std::runtime_error("output " + text::quoted(it.key()) + " has dtype " + d +
                                   ", which the worker's capabilities do not list");
      }
    } catch (const json::exception&) {
      return;  // read_outputs reports the malformed header
    }
  }

  std::string command_;
  double timeout_s_;
  exec::TempFolder session_;
  std::unique_ptr<Worker> worker_;
  Capabilities caps_;
  bool started_ = false;
  int64_t cases_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_exec2_backend(const std::string& command, const BackendOptions& opt) {
  return std::make_unique<Exec2Backend>(command, opt.exec_timeout_s);
}

}  // namespace dsa
