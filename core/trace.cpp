#include "core/trace.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
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

}  // namespace

bool tracing() { return trace().on(); }

TraceSpan::TraceSpan(const char* name) : name_(name) {
  if (trace().on()) begin_us_ = trace().now_us();
}

TraceSpan::~TraceSpan() {
  if (begin_us_ >= 0) trace().add(name_, begin_us_, trace().now_us());
}

}  // namespace dsa
