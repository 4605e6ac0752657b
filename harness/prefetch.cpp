#include "harness/prefetch.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "core/inputs.hpp"
#include "core/layout.hpp"
#include "core/stopwatch.hpp"
#include "core/trace.hpp"
#include "harness/run_case.hpp"

namespace dsa {

namespace {

using Clock = std::chrono::steady_clock;

// Bytes of the case's inputs (doubles), 0 when the case does not even validate (its preparation
// will say why, in take()).
double input_bytes(const Case& c) {
  try {
    const int64_t tp = make_layout(c.problem.seqlens, c.problem.cp, c.problem.pad_rows).tp;
    double n = 0;
    Inputs{}.for_each([&](const std::string& name, const TensorD&) {
      double size = 1;
      for (int64_t e : input_shape(name, c.problem.dims, tp)) size *= double(e);
      n += size;
    });
    return n * sizeof(double);
  } catch (const std::exception&) {
    return 0;
  }
}

double host_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : double(uint64_t{8} << 30);
}

}  // namespace

double backend_ahead_limit(const Oracle& oracle) { return oracle.device_memory_bytes() / 32; }

// One started case: written by the worker (its preparation, then maybe its run ahead), read by
// take() once the futures say so.
struct CasePrefetch::Slot {
  Case c;
  double bytes = 0;  // input_bytes(c)
  PreparedCase pc;
  std::exception_ptr prepare_error;
  std::optional<BackendAhead> ahead;
};

void CasePrefetch::start(const Case& c) {
  // A case's host side holds its inputs several times over (the backend's, the oracles' results):
  // a case in flight beside it is kept to 1/16 of the memory.
  const double bytes = input_bytes(c);
  if (bytes > host_bytes() / 16) return;
  std::string key = to_json(c).dump();
  if (std::any_of(pending_.begin(), pending_.end(), [&](const Pending& p) { return p.key == key; })) return;
  if (pending_.size() == kMaxPending) {
    if (pending_.front().ran) pending_.front().ran->wait();
    pending_.front().prepared.wait();
    pending_.pop_front();
  }
  auto slot = std::make_shared<Slot>();
  slot->c = c;
  slot->bytes = bytes;
  Oracle* const keep = bytes <= ahead_max_bytes_ ? keep_oracle_ : nullptr;
  std::shared_future<void> prepared = worker_.run([slot, keep] {
    try {
      const TraceSpan span("generate (ahead)");
      slot->pc = prepare_case(slot->c);
    } catch (...) {
      slot->prepare_error = std::current_exception();
      return;
    }
    // Beside the judge of the case in flight; part of the preparation, so that take() cannot move
    // the inputs away while they go up.
    if (keep) keep->keep_inputs_ahead(slot->pc);
  });
  pending_.push_back({std::move(key), std::move(slot), std::move(prepared), std::nullopt});
}

PreparedCase CasePrefetch::take(const Case& c, double* waited_s, std::optional<BackendAhead>* ahead) {
  const auto t0 = Clock::now();
  const std::string key = pending_.empty() ? std::string() : to_json(c).dump();
  auto it = std::find_if(pending_.begin(), pending_.end(), [&](const Pending& p) { return p.key == key; });
  if (ahead) ahead->reset();
  if (it == pending_.end()) {  // not started: prepared here, what is in flight kept for later
    taken_bytes_ = input_bytes(c);
    PreparedCase pc = prepare_case(c);
    if (waited_s) *waited_s = seconds_since(t0);
    return pc;
  }
  for (auto old = pending_.begin(); old != it; ++old) {
    if (old->ran) old->ran->wait();
    old->prepared.wait();
  }
  Pending mine = std::move(*it);
  taken_bytes_ = mine.slot->bytes;
  pending_.erase(pending_.begin(), it + 1);
  mine.prepared.get();  // the task itself never throws: its errors are in the slot
  if (waited_s) *waited_s = seconds_since(t0);
  if (mine.ran) mine.ran->get();  // the run ahead reads the inputs: done before they are handed out
  if (mine.slot->prepare_error) std::rethrow_exception(mine.slot->prepare_error);
  if (ahead) *ahead = std::move(mine.slot->ahead);
  return std::move(mine.slot->pc);
}

void CasePrefetch::run_backends_ahead(Backend& b, double max_input_bytes, Oracle* keep) {
  ahead_backend_ = &b;
  ahead_max_bytes_ = max_input_bytes;
  keep_oracle_ = keep;
}

void CasePrefetch::backend_free() {
  if (!ahead_backend_ || pending_.empty()) return;
  Pending& next = pending_.front();
  // The case being judged holds the oracle's memory meanwhile: both must be small.
  if (next.ran || taken_bytes_ > ahead_max_bytes_ || next.slot->bytes > ahead_max_bytes_) return;
  // The case as run_case gives it to the backend: only the stages the backend implements.
  std::optional<Case> runs = backend_case(next.slot->c, *ahead_backend_);
  if (!runs) return;
  Backend* b = ahead_backend_;
  // On a thread of its own, so the case after it is generated meanwhile.
  next.ran = runner_.run([slot = next.slot, prepared = next.prepared, b, c = std::move(*runs)] {
    prepared.wait();
    if (slot->prepare_error) return;  // take() rethrows it; nothing to run
    slot->pc.stages = c.stages;
    BackendAhead a;
    const auto t0 = Clock::now();
    try {
      const TraceSpan span("backend (ahead)");
      a.run = b->run(c, slot->pc);
    } catch (...) {
      a.error = std::current_exception();
    }
    a.seconds = a.run.seconds > 0 ? a.run.seconds : seconds_since(t0);
    slot->ahead = std::move(a);
  }).share();
}

void CasePrefetch::wait_for_backend() {
  for (auto& p : pending_)
    if (p.ran) p.ran->wait();
}

}  // namespace dsa
