#include "harness/mpi_backend.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "core/errors.hpp"
#include "harness/exec_protocol.hpp"
#include "harness/interrupt.hpp"
#include "harness/mpi_wire.hpp"

namespace dsa::mpi {

using nlohmann::json;

struct MpiBackend::Seen {
  bool agreed = false, done = false;
  uint64_t case_hash = 0, inputs_hash = 0;
  std::string seed;
  int64_t entered = 0;  // collectives entered in this case
  bool inside = false;  // inside collective `entered`
  std::string what;     // its name
  RankResult out;
};

// Rank 0's part of a case. Shared with its thread, which holds its own copies of what it reads: a
// thread stuck in a collective outlives run() (the job is aborted after the report).
struct MpiBackend::OwnRank {
  RankCase rc;
  std::atomic<bool> done{false};
  std::exception_ptr error;
  RankResult result;
  std::atomic<int64_t> entered{0};
  std::atomic<bool> inside{false};
  std::atomic<const char*> what{""};
};

namespace {

// Open MPI's mpirun ends a job whose rank died without a word (SIGKILL, _exit, the OOM killer) or
// that was interrupted by sending every process SIGCONT, then a second later SIGTERM and SIGKILL
// at once (odls_base_sigkill_timeout): the SIGCONT is rank 0's only chance to write its report.
// Job control is not forwarded to the ranks by default, so a SIGCONT means exactly that.
std::atomic<bool> g_launcher_ending{false};
struct sigaction g_old_cont;
extern "C" void on_sigcont(int) { g_launcher_ending = true; }

}  // namespace

MpiBackend::MpiBackend(Channel& ch, RankPart& part, std::string spec, double rank_timeout_s, int threads,
                       std::vector<PlantedFault> faults)
    : ch_(ch), part_(part), spec_(std::move(spec)), timeout_s_(rank_timeout_s), threads_(threads),
      faults_(std::move(faults)) {
  g_launcher_ending = false;
  struct sigaction sa {};
  sa.sa_handler = on_sigcont;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGCONT, &sa, &g_old_cont);
}

MpiBackend::~MpiBackend() {
  part_.observe(nullptr);
  sigaction(SIGCONT, &g_old_cont, nullptr);
}

namespace {

std::string list_ranks(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string hex(uint64_t h) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

std::string seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g s", s);
  return b;
}

}  // namespace

void MpiBackend::fail(int rank, const std::string& how, const std::string& message, bool abort) {
  failure_ = RankFailure{rank, how, message};
  abort_ = abort_ || abort;
  throw std::runtime_error(message);
}

// "computing, 2 collectives done" | "inside collective 3 (allgather)" | "done": what a rank was
// doing when rank 0 last heard of it.
std::string MpiBackend::state_of(int r) const {
  const Seen& s = seen_[r];
  if (s.done) return "done";
  if (s.inside) return "inside collective " + std::to_string(s.entered) + " (" + s.what + ")";
  if (s.entered == 0) return "computing, no collective entered";
  return "computing after collective " + std::to_string(s.entered) + " (" + s.what + ")";
}

// The ranks the others wait for. While agreeing: those that did not confirm the case. Running: of
// the ranks not done, those outside any collective with the fewest entered (the others are stuck
// inside a collective they are in because of them); if all are inside one, those with the fewest.
std::vector<int> MpiBackend::late_ranks(bool agreeing) const {
  std::vector<int> late, culprits;
  for (int r = 0; r < ch_.size(); ++r)
    if (agreeing ? !seen_[r].agreed : !seen_[r].done) late.push_back(r);
  if (agreeing || late.empty()) return late;
  int64_t fewest = INT64_MAX;
  for (int r : late) fewest = std::min(fewest, seen_[r].entered);
  for (int r : late)
    if (seen_[r].entered == fewest && !seen_[r].inside) culprits.push_back(r);
  if (culprits.empty())
    for (int r : late)
      if (seen_[r].entered == fewest) culprits.push_back(r);
  return culprits;
}

void MpiBackend::timed_out(const char* stage) {
  const bool agreeing = std::strcmp(stage, "agree") == 0;
  const std::vector<int> culprits = late_ranks(agreeing);
  std::string msg = list_ranks(culprits) + " timed out after " + seconds(timeout_s_) + " (--rank-timeout): ";
  if (agreeing) {
    msg += "no confirmation of the case (its hashes) came";
  } else {
    std::string others;
    for (int r = 0; r < ch_.size(); ++r)
      if (std::find(culprits.begin(), culprits.end(), r) == culprits.end())
        others += (others.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " " + state_of(r);
    msg += (culprits.size() == 1 ? "it was " : "the first was ") + state_of(culprits.front());
    if (!others.empty()) msg += "; " + others;
  }
  fail(culprits.empty() ? -1 : culprits.front(), "timeout", msg, true);
}

bool MpiBackend::pump(int64_t seq) {
  bool any = false;
  while (auto m = ch_.poll(MPI_ANY_SOURCE, Tag::fault)) {
    const json j = json::parse(m->bytes);
    const int r = j.value("rank", m->from);
    std::string msg = "rank " + std::to_string(r) + " " + (j.value("how", "") == "error" ? "failed" : "crashed");
    msg += j.value("seq", int64_t{-1}) == seq ? " during the case" : " between cases";
    msg += ": " + j.value("what", std::string("?"));
    if (r >= 0 && r < ch_.size() && j.value("seq", int64_t{-1}) == seq && !seen_.empty())
      msg += " (it was " + state_of(r) + ")";
    fail(r, "crash", msg, true);
  }
  while (auto m = ch_.poll(MPI_ANY_SOURCE, Tag::progress)) {
    any = true;
    const json j = json::parse(m->bytes);
    if (j.at("seq").get<int64_t>() != seq) continue;
    Seen& s = seen_[m->from];
    s.entered = j.at("entered").get<int64_t>();
    s.inside = j.at("inside").get<bool>();
    s.what = j.at("what").get<std::string>();
  }
  while (auto m = ch_.poll(MPI_ANY_SOURCE, Tag::agree)) {
    any = true;
    const json j = json::parse(m->bytes);
    if (j.at("seq").get<int64_t>() != seq) continue;
    Seen& s = seen_[m->from];
    s.agreed = true;
    s.case_hash = std::stoull(j.at("case").get<std::string>(), nullptr, 16);
    s.inputs_hash = std::stoull(j.at("inputs").get<std::string>(), nullptr, 16);
    s.seed = j.at("seed").get<std::string>();
  }
  while (auto m = ch_.poll(MPI_ANY_SOURCE, Tag::output)) {
    any = true;
    int64_t got = -1;
    if (m->bytes.size() >= sizeof got) std::memcpy(&got, m->bytes.data(), sizeof got);
    if (got != seq) continue;
    try {
      seen_[m->from].out = unpack_rank_result(m->bytes.substr(sizeof got));
    } catch (const std::exception& e) {
      fail(m->from, "crash", "rank " + std::to_string(m->from) + " sent a malformed result: " + e.what(), true);
    }
    seen_[m->from].done = true;
  }
  if (own_) {  // rank 0's own progress, from its thread
    Seen& s = seen_[0];
    s.entered = own_->entered;
    s.inside = own_->inside;
    s.what = own_->what.load();
    if (own_->done) {
      if (own_->error) {
        std::string what = "?";
        try {
          std::rethrow_exception(own_->error);
        } catch (const std::exception& e) {
          what = e.what();
        }
        fail(0, "crash", "rank 0 failed during the case: error: " + what, true);
      }
      s.done = true;
    }
  }
  return any;
}

template <class Done>
void MpiBackend::wait_until(Done done, int64_t seq, const char* stage) {
  Backoff backoff;
  for (;;) {
    if (pump(seq)) backoff.reset();
    if (done()) return;
    const int sig = g_launcher_ending ? SIGTERM : interrupt::pending();
    if (sig) {
      // The launcher is ending the job (SIGCONT or SIGTERM: a rank died without a word, or the
      // run was interrupted), or a user interrupted rank 0 (SIGINT). Either way the case in flight
      // is dropped and the report written at once (interrupted, exit 128 + signal), naming the
      // ranks still awaited. After a SIGCONT there is a second before the SIGKILL: a fifth of it
      // goes to the progress notes still on their way, so that the living ranks are seen inside
      // the collective they wait in and the dead one is named alone.
      if (g_launcher_ending) {
        const auto until = Clock::now() + std::chrono::milliseconds(200);
        while (Clock::now() < until && !done()) {
          pump(seq);
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
      const std::vector<int> late = late_ranks(std::strcmp(stage, "agree") == 0);
      const char* what = g_launcher_ending ? "SIGCONT (the launcher is ending the job)" : sig == SIGTERM ? "SIGTERM" : "SIGINT";
      failure_ = RankFailure{late.empty() ? -1 : late.front(), "terminated",
                             std::string(what) + " while waiting for " +
                                 (late.empty() ? std::string("no rank") : list_ranks(late) + " (" + state_of(late.front()) + ")") +
                                 ": a launcher ends the job so when a rank died without a word (SIGKILL, _exit, "
                                 "the OOM killer), or when the run is interrupted"};
      abort_ = true;
      throw interrupt::Stopped{sig};
    }
    if (const auto d = interrupt::deadline(); d && Clock::now() >= *d) {  // --time-budget's hard limit
      abort_ = true;
      throw interrupt::Stopped{0};
    }
    if (Clock::now() >= deadline_) timed_out(stage);
    backoff.idle();
  }
}

void MpiBackend::handshake(const json& mine) {
  deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  const int world = ch_.size();
  std::vector<std::optional<json>> hello(world);
  hello[0] = mine;
  Backoff backoff;
  for (;;) {
    while (auto m = ch_.poll(MPI_ANY_SOURCE, Tag::hello)) hello[m->from] = json::parse(m->bytes);
    if (auto m = ch_.poll(MPI_ANY_SOURCE, Tag::fault)) {
      const json j = json::parse(m->bytes);
      failure_ = RankFailure{m->from, "crash", "rank " + std::to_string(m->from) + " crashed at the start: " +
                                                   j.value("what", std::string("?"))};
      abort_ = true;
      return;
    }
    std::vector<int> missing;
    for (int r = 0; r < world; ++r)
      if (!hello[r]) missing.push_back(r);
    if (missing.empty()) break;
    if (Clock::now() >= deadline_) {
      failure_ = RankFailure{missing.front(), "timeout",
                             list_ranks(missing) + " timed out after " + seconds(timeout_s_) +
                                 " (--rank-timeout): no hello at the start of the run"};
      abort_ = true;
      return;
    }
    backoff.idle();
  }
  for (int r = 1; r < world; ++r) {
    std::string diffs;
    for (auto& [key, value] : mine.items())
      if (!hello[r]->contains(key) || (*hello[r])[key] != value)
        diffs += (diffs.empty() ? "" : "; ") + key + " " + (hello[r]->contains(key) ? (*hello[r])[key].dump() : "missing") +
                 " (rank 0: " + value.dump() + ")";
    if (!diffs.empty()) {
      failure_ = RankFailure{r, "disagree", "rank " + std::to_string(r) + " (host " + hello[r]->value("host", "?") +
                                                ") disagrees with rank 0 at the start: " + diffs};
      return;  // the ranks are healthy and idle: the run ends with an end message, not an abort
    }
  }
}

BackendRun MpiBackend::run(const Case& c, const PreparedCase& pc) {
  if (failure_ || abort_)
    throw std::runtime_error("the MPI ranks cannot run another case: " + (failure_ ? failure_->message : "a case was stopped"));
  const int world = ch_.size();
  if (const std::string why = part_.refuses(pc); !why.empty()) throw Unavailable(why);  // no rank is sent it
  if (pc.problem.cp.size != world)
    throw Unavailable("the case has cp " + std::to_string(pc.problem.cp.size) + ", but --comm mpi runs cases of cp = the MPI " +
                      "world size, " + std::to_string(world) + " here (run it under mpirun -np " +
                      std::to_string(pc.problem.cp.size) + ")");
  const int64_t seq = seq_++;
  const auto t0 = Clock::now();
  deadline_ = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  seen_.assign(world, Seen{});
  own_.reset();

  // 1. The case to every rank, which generates its inputs from the seed and confirms the hashes.
  const json body = to_json(c);
  const std::string text = json{{"seq", seq}, {"case", body}}.dump();
  for (int r = 1; r < world; ++r)
    if (!ch_.send(r, Tag::case_, text, deadline_)) {
      seen_[r].agreed = false;
      fail(r, "timeout", "rank " + std::to_string(r) + " timed out after " + seconds(timeout_s_) +
                             " (--rank-timeout): it did not take the case", true);
    }
  // What each rank must have generated: rank 0's digest of that rank's part of the whole case.
  auto own = std::make_shared<OwnRank>();
  own->rc = part_.take(pc, 0);
  std::vector<uint64_t> expected(world);
  expected[0] = part_digest(own->rc);
  for (int r = 1; r < world; ++r) expected[r] = part_.sharded() ? part_digest(part_.take(pc, r)) : expected[0];
  Seen& me = seen_[0];
  me.agreed = true;
  me.case_hash = text_digest(body.dump());
  me.inputs_hash = expected[0];
  me.seed = std::to_string(c.seed);
  wait_until([&] { return std::all_of(seen_.begin(), seen_.end(), [](const Seen& s) { return s.agreed; }); }, seq,
             "agree");

  // 2. Every rank runs the same case on the same inputs, or none does.
  for (int r = 1; r < world; ++r) {
    const Seen& s = seen_[r];
    if (s.case_hash == me.case_hash && s.inputs_hash == expected[r]) continue;
    std::string msg = "rank " + std::to_string(r) + " disagrees with rank 0 on the case: ";
    if (s.case_hash != me.case_hash)
      msg += "its case (seed " + s.seed + ") hashes to " + hex(s.case_hash) + ", rank 0's (seed " + me.seed + ") to " +
             hex(me.case_hash);
    else
      msg += "its inputs hash to " + hex(s.inputs_hash) + ", rank 0's of them to " + hex(expected[r]);
    for (int q = 1; q < world; ++q) ch_.send(q, Tag::go, json{{"seq", seq}, {"go", false}}.dump(), deadline_);
    fail(r, "disagree", msg, false);
  }
  for (int r = 1; r < world; ++r)
    if (!ch_.send(r, Tag::go, json{{"seq", seq}, {"go", true}}.dump(), deadline_))
      fail(r, "timeout", "rank " + std::to_string(r) + " timed out after " + seconds(timeout_s_) +
                             " (--rank-timeout): it did not take the go", true);

  // 3. Rank 0's part on a thread of its own; the main thread watches the others meanwhile.
  own_ = own;
  const int64_t base = part_.entered();  // the counts of this case start at 0
  part_.observe([own, base](int64_t entered, const char* what, bool inside) {
    own->entered = entered - base;
    own->inside = inside;
    own->what = what;
  });
  std::thread([own, &part = part_, threads = threads_, faults = faults_, seq] {
    omp_set_num_threads(threads);
    try {
      act_planted(faults, 0, seq);
      own->result = part.run(own->rc);
    } catch (...) {
      own->error = std::current_exception();
    }
    own->done = true;
  }).detach();  // joined through `done`; one stuck in a collective is ended by MPI_Abort
  wait_until([&] { return std::all_of(seen_.begin(), seen_.end(), [](const Seen& s) { return s.done; }); }, seq,
             "run");

  // 4. The global Result, assembled as in process.
  std::vector<RankResult> ranks(world);
  ranks[0] = std::move(own->result);
  for (int r = 1; r < world; ++r) ranks[r] = std::move(seen_[r].out);
  own_.reset();
  BackendRun out;
  out.result = assemble_ranks(pc.layout, ranks);
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  dump_for_tests(c, out.result, seq);
  return out;
}

// DSA_TEST_MPI_DUMP=DIR (the tests of bit-for-bit equality with the in-process run only): each
// case and its assembled Result, as DIR/case-<seq>.json and DIR/result-<seq>.safetensors (F64,
// lossless; read back with exec::read_outputs).
void MpiBackend::dump_for_tests(const Case& c, const Result& r, int64_t seq) {
  const char* dir = std::getenv("DSA_TEST_MPI_DUMP");
  if (!dir || !*dir) return;
  const std::string stem = std::string(dir) + "/";
  save_case(c, stem + "case-" + std::to_string(seq) + ".json");
  st::write_file(stem + "result-" + std::to_string(seq) + ".safetensors", exec::outputs_file(r, exec::FloatOut::f64));
}

bool MpiBackend::end() {
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  bool ok = true;
  for (int r = 1; r < ch_.size(); ++r) ok = ch_.send(r, Tag::end, "{}", deadline) && ok;
  return ok;
}

}  // namespace dsa::mpi
