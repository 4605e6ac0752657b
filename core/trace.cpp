#include "core/trace.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dsa {

namespace {

struct Event {
  const char* name;
  long long begin_us, end_us;
  size_t thread;
};

// Written out when the process ends normally (static destruction).
class Trace {
 public:
  Trace() {
    if (const char* f = std::getenv("DSA_TRACE"); f && *f) path_ = f;
  }
  ~Trace() { write(); }
  bool on() const { return !path_.empty(); }
  long long now_us() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0_).count();
  }
  void add(const char* name, long long b, long long e) {
    const size_t tid = std::hash<std::thread::id>{}(std::this_thread::get_id());
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back({name, b, e, tid});
  }

 private:
  void write() {
    if (!on()) return;
    std::FILE* f = std::fopen(path_.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "DSA_TRACE: cannot write %s\n", path_.c_str());
      return;
    }
    // Thread ids as small numbers, in order of first appearance.
    std::vector<size_t> threads;
    auto tid_of = [&](size_t t) {
      for (size_t i = 0; i < threads.size(); ++i)
        if (threads[i] == t) return i;
      threads.push_back(t);
      return threads.size() - 1;
    };
    std::fprintf(f, "{\"traceEvents\": [\n");
    for (size_t i = 0; i < events_.size(); ++i) {
      const Event& e = events_[i];
      std::fprintf(f, "{\"name\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %zu, \"ts\": %lld, \"dur\": %lld}%s\n",
                   e.name, tid_of(e.thread), e.begin_us, e.end_us - e.begin_us, i + 1 < events_.size() ? "," : "");
    }
    std::fprintf(f, "], \"displayTimeUnit\": \"ms\"}\n");
    std::fclose(f);
  }

  std::string path_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  std::vector<Event> events_;
};

Trace& trace() {
  static Trace t;
  return t;
}

long long now_us() {
  static const auto t0 = std::chrono::steady_clock::now();
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
}

// The open spans of each thread that has one open, in order of each thread's first open span (a
// thread whose spans all closed leaves: rank threads come and go with every case). Leaked: spans
// may close during static destruction.
struct OpenSpans {
  struct Open {
    const char* name;
    long long since_us;
  };
  std::mutex mu;
  std::vector<std::pair<std::thread::id, std::vector<Open>>> threads;

  std::vector<Open>& of_this_thread() {
    const std::thread::id me = std::this_thread::get_id();
    for (auto& [id, open] : threads)
      if (id == me) return open;
    threads.push_back({me, {}});
    return threads.back().second;
  }
};

OpenSpans& open_registry() {
  static auto* r = new OpenSpans;
  return *r;
}

}  // namespace

bool tracing() { return trace().on(); }

std::string open_spans() {
  OpenSpans& r = open_registry();
  const long long now = now_us();
  std::lock_guard<std::mutex> lock(r.mu);
  std::string out;
  for (size_t t = 0; t < r.threads.size(); ++t) {
    const auto& open = r.threads[t].second;
    if (open.empty()) continue;
    out += (out.empty() ? "" : "; ") + ("thread " + std::to_string(t + 1) + ": ");
    for (size_t k = 0; k < open.size(); ++k) {
      char b[48];
      std::snprintf(b, sizeof b, " %.3g s", double(now - open[k].since_us) / 1e6);
      out += (k ? " > " : "") + std::string(open[k].name) + b;
    }
  }
  return out;
}

bool span_open(const char* name) {
  OpenSpans& r = open_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& [id, open] : r.threads)
    for (const auto& o : open)
      if (std::strcmp(o.name, name) == 0) return true;
  return false;
}

TraceSpan::TraceSpan(const char* name) : name_(name), open_us_(now_us()) {
  if (trace().on()) begin_us_ = trace().now_us();
  OpenSpans& r = open_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.of_this_thread().push_back({name_, open_us_});
}

TraceSpan::~TraceSpan() {
  if (begin_us_ >= 0) trace().add(name_, begin_us_, trace().now_us());
  OpenSpans& r = open_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const std::thread::id me = std::this_thread::get_id();
  for (auto t = r.threads.begin(); t != r.threads.end(); ++t) {
    if (t->first != me) continue;
    auto& open = t->second;
    // Spans nest on a thread (scoped objects), so this is normally the innermost one.
    for (size_t k = open.size(); k-- > 0;)
      if (open[k].name == name_ && open[k].since_us == open_us_) {
        open.erase(open.begin() + long(k));
        break;
      }
    if (open.empty()) r.threads.erase(t);
    return;
  }
}

}  // namespace dsa
