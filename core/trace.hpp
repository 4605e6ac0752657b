// A timeline of where a run's time goes, for the cases where the per-case split (generate /
// backend / oracle / compare) is not enough: those parts overlap on several threads, and a case's
// wall time is set by what waits on what. With DSA_TRACE=FILE in the environment, every TraceSpan
// is recorded and FILE is written at exit in the Chrome trace-event format (open it in Perfetto or
// chrome://tracing: one row per thread). Without it a span costs a lock and a push: spans mark
// the coarse phases of a case (generate, backend, each oracle stage), never inner loops.
//
// Every open span is also listed (open_spans), so that a session whose case never returns can say
// where each thread is (harness/stall_watch.hpp).
#pragma once

#include <string>

namespace dsa {

bool tracing();

// The spans open right now, outermost first, for each thread with one open (numbered in the order
// their open spans began): "thread 1: backend 212 s; thread 2: fused: rank 212 s > fused: local
// all-gather 211 s". Empty when none is open.
std::string open_spans();
// Whether some thread has a span of this name open right now.
bool span_open(const char* name);

// [construction, destruction) on the calling thread, named by a string literal.
class TraceSpan {
 public:
  explicit TraceSpan(const char* name);
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  const char* name_;
  long long begin_us_ = -1;  // −1: not tracing
  long long open_us_;        // when it opened (open_spans)
};

}  // namespace dsa
