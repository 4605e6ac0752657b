#include "harness/run_case.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>

#include "check/repeats.hpp"
#include "core/errors.hpp"
#include "core/stopwatch.hpp"
#include "core/trace.hpp"
#include "harness/bucket.hpp"
#include "harness/generate.hpp"

namespace dsa {

namespace {

using Clock = std::chrono::steady_clock;

bool is_std_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

// A backend run that threw: the whole case fails as a crash (or a timeout: the exec backend's
// time limit), whatever an earlier run of it said.
static void crashed(CaseVerdict& v, const std::string& msg) {
  v.verdict = Verdict::fail;
  v.stage.reset();
  v.tensor = "-";
  v.failure = msg.find("timed out") != std::string::npos ? Failure::timeout : Failure::crash;
  v.message = msg;
}

static CaseVerdict run_case_stages(const Case& c, PreparedCase pc, double generate_s, Backend& b, Oracle* oracle,
                                   int repeat, CasePrefetch* prefetch, std::optional<BackendAhead> ahead);

PreparedCase prepare_case(const Case& c) {
  validate(c.problem);
  return prepare(c.problem, generate_inputs(c), injected_indices(c), c.stages);
}

std::optional<Case> backend_case(const Case& asked, const Backend& b, std::string* skipped) {
  const std::vector<Stage> implemented = b.stages();
  Case c = asked;
  c.stages.clear();
  for (Stage s : asked.stages) {
    if (std::find(implemented.begin(), implemented.end(), s) != implemented.end())
      c.stages.push_back(s);
    else if (skipped)
      *skipped += (skipped->empty() ? "" : ", ") + std::string(name(s));
  }
  if (c.stages.empty()) return std::nullopt;
  return c;
}

CaseVerdict run_case(const Case& asked, Backend& b, Oracle* oracle, int repeat, CasePrefetch* prefetch) {
  // Only the stages the backend implements are checked; the others are named in the message.
  std::string skipped;
  const std::optional<Case> runs = backend_case(asked, b, &skipped);
  if (!runs) {
    CaseVerdict v;
    v.verdict = Verdict::cannot_run;
    v.message = "backend " + b.name() + " implements none of the case's stages (" + skipped + ")";
    return v;
  }
  const Case& c = *runs;
  double generate_s = 0;
  PreparedCase pc;
  std::optional<BackendAhead> ahead;
  if (prefetch) {
    const TraceSpan span("wait for inputs");
    pc = prefetch->take(asked, &generate_s, &ahead);
  } else {
    const TraceSpan span("generate");
    const auto g0 = Clock::now();
    pc = prepare_case(c);
    generate_s = seconds_since(g0);
  }
  pc.stages = c.stages;  // generation does not depend on them: a prefetched case has the asked ones
  CaseVerdict v = run_case_stages(c, std::move(pc), generate_s, b, oracle, repeat, prefetch, std::move(ahead));
  if (!skipped.empty()) {
    const std::string note = "stages not implemented by the backend, not checked: " + skipped;
    v.message = v.message.empty() ? note : v.message + "; " + note;
  }
  return v;
}

static CaseVerdict run_case_stages(const Case& c, const PreparedCase pc, double generate_s, Backend& b,
                                   Oracle* oracle, int repeat, CasePrefetch* prefetch,
                                   std::optional<BackendAhead> ahead) {
  BackendRun run;
  double backend_s = 0;
  std::exception_ptr failed;
  if (ahead) {  // run while the case before this one was judged
    backend_s = ahead->seconds;
    failed = ahead->error;
    if (failed && !is_std_exception(failed)) std::rethrow_exception(failed);  // a stop (interrupt.hpp)
    if (!failed) run = std::move(ahead->run);
  } else {
    const auto t0 = Clock::now();
    try {
      const TraceSpan span("backend");
      run = b.run(c, pc);
    } catch (const std::exception&) {
      failed = std::current_exception();
    }
    backend_s = run.seconds > 0 ? run.seconds : seconds_since(t0);
  }
  // The backend is free: the next case may run on it while this one is judged. Not under
  // --repeat, whose later runs of this case come after the judge.
  if (prefetch && repeat == 1) prefetch->backend_free();
  if (failed) {
    CaseVerdict v;
    try {
      std::rethrow_exception(failed);
    } catch (const Unavailable& e) {
      v.verdict = Verdict::cannot_run;
      v.message = e.what();
    } catch (const std::exception& e) {
      crashed(v, e.what());
      v.bucket = make_bucket(b.name(), v.stage_name(), v.tensor, v.failure);
    }
    v.generate_s = generate_s;
    v.backend_s = backend_s;
    return v;
  }

  std::unique_ptr<Oracle> cpu;
  if (!oracle) {
    cpu = make_cpu_oracle();
    oracle = cpu.get();
  }
  CaseVerdict v = [&] {
    const TraceSpan span("judge");
    return judge(pc, run.result, *oracle);
  }();
  v.generate_s = generate_s;
  v.backend_s = backend_s;
  // --repeat: the same case again; a run that throws is the case's crash, like the first one.
  if (repeat > 1 && v.verdict != Verdict::not_run && v.verdict != Verdict::cannot_run) {
    const std::vector<std::string> deterministic = b.deterministic();
    int runs = 1;
    for (int k = 2; k <= repeat; ++k) {
      const auto tk = Clock::now();
      BackendRun again;
      try {
        again = b.run(c, pc);
      } catch (const std::exception& e) {
        crashed(v, "run " + std::to_string(k) + " of --repeat " + std::to_string(repeat) + ": " + e.what());
        break;
      }
      v.backend_s += again.seconds > 0 ? again.seconds : seconds_since(tk);
      ++runs;
      // Another legal selection computes everything after it on other keys: judged on its own.
      std::optional<CaseVerdict> own;
      if (selection_changed(run.result, again.result, deterministic)) own = judge(pc, again.result, *oracle);
      check_repeat(v, run.result, again.result, deterministic, own ? &*own : nullptr, !pc.injected);
    }
    v.backend_s /= runs;
  }
  if (v.failed()) v.bucket = make_bucket(b.name(), v.stage_name(), v.tensor, v.failure);
  return v;
}

}  // namespace dsa
