// A timeline of where a run's time goes, for the cases where the per-case split (generate /
// backend / oracle / compare) is not enough: those parts overlap on several threads, and a case's
// wall time is set by what waits on what. With DSA_TRACE=FILE in the environment, every TraceSpan
// is recorded and FILE is written at exit in the Chrome trace-event format (open it in Perfetto or
// chrome://tracing: one row per thread). Without it a span costs one branch.
#pragma once

namespace dsa {

bool tracing();

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
};

}  // namespace dsa
