#include "harness/mpi_session.hpp"

#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "harness/mpi_backend.hpp"
#include "harness/mpi_channel.hpp"
#include "harness/mpi_fault_injection.hpp"
#include "harness/mpi_rank_part.hpp"
#include "harness/mpi_watchdog.hpp"
#include "harness/mpi_wire.hpp"
#include "harness/report.hpp"
#include "harness/run_case.hpp"
#include "reference/comm_mpi.hpp"

namespace dsa {

namespace {

using nlohmann::json;
using namespace dsa::mpi;

// MPI_Finalize at the end of its scope, after the communicators made in it are freed.
struct Finalizer {
  ~Finalizer() { MPI_Finalize(); }
};

// What every rank must share: the build and the backend (the handshake compares these keys).
json identity(const SessionOptions& o, const std::string& tool_version, int world) {
  const json env = environment_json();
  json id = {{"tool", tool_version}, {"backend", o.backend}, {"rank_timeout", o.backend_opt.rank_timeout_s},
             {"world_size", world}};
  for (const char* key : {"git_sha", "git_dirty", "build_type", "compile_flags", "cuda", "nccl"}) id[key] = env.at(key);
  return id;
}

// The OpenMP threads of one rank's part: the host's threads shared by the ranks on it, which is
// what an in-process rank gets (run_core_sharded: threads / cp), so that both give the same bits.
int threads_per_rank() {
  MPI_Comm local;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
  int n = 1;
  MPI_Comm_size(local, &n);
  MPI_Comm_free(&local);
  return std::max(1, omp_get_max_threads() / n);
}

std::string hex(uint64_t h) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

// Ends the job now: the report is written, but ranks may be stuck in a collective for ever. What
// the rank's part holds in one (an NCCL communicator) is released first (mpi_watchdog.hpp).
[[noreturn]] void abort_job(int code, const std::string& why) {
  release_before_abort();
  std::fflush(stdout);
  std::fprintf(stderr, "dsa-parity: ending the MPI job (MPI_Abort, exit %d): %s\n", code, why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

int drive(const SessionOptions& o, Channel& ch, RankPart& part, int threads, const std::vector<PlantedFault>& faults,
          const json& mine) {
  MpiBackend backend(ch, part, o.backend, o.backend_opt.rank_timeout_s, threads, faults);
  backend.handshake(mine);
  SessionOptions so = o;
  so.world_size = ch.size();
  so.rank_devices = part.devices();
  int code = 0;
  try {
    code = run_session(so, backend);
  } catch (const std::exception& e) {
    if (backend.must_abort()) abort_job(4, std::string("error: ") + e.what());
    backend.end();
    throw;
  }
  const auto failure = backend.rank_failure();
  if (backend.must_abort()) abort_job(code, failure ? failure->message : "a case was stopped while the ranks ran it");
  if (!backend.end()) abort_job(code, "a rank did not take the end of the run");
  return code;
}

// One case on a rank other than 0: generate its part, confirm, run it, send its rows.
void serve_case(Channel& ch, RankPart& part, const std::vector<PlantedFault>& faults, const json& msg, int64_t seq) {
  Case c = case_from_json(msg.at("case"));
  if (planted(faults, ch.rank(), seq, "seed")) c.seed += 1;
  const RankCase rc = part.generate(c, ch.rank());
  ch.send(0, Tag::agree,
          json{{"seq", seq}, {"case", hex(text_digest(to_json(c).dump()))}, {"inputs", hex(part_digest(rc))},
               {"seed", std::to_string(c.seed)}}
              .dump());
  if (!json::parse(ch.wait(0, {Tag::go}).bytes).at("go").get<bool>()) return;  // a rank disagreed: none runs
  act_planted(faults, ch.rank(), seq);
  const int64_t base = part.entered();
  part.observe([&](int64_t entered, const char* what, bool inside) {
    ch.send(0, Tag::progress,
            json{{"seq", seq}, {"entered", entered - base}, {"inside", inside}, {"what", what}}.dump());
  });
  const RankResult mine = part.run(rc);
  part.observe(nullptr);
  std::string out(sizeof seq, '\0');
  std::memcpy(out.data(), &seq, sizeof seq);
  ch.send(0, Tag::output, out + pack_rank_result(mine));
}

int serve(const SessionOptions& o, Channel& ch, RankPart& part, int threads, const std::vector<PlantedFault>& faults,
          json hello) {
  omp_set_num_threads(threads);
  RankWatchdog watchdog(ch, o.backend_opt.rank_timeout_s);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  hello["host"] = host;
  if (planted(faults, ch.rank(), 0, "hello")) hello["tool"] = "dsa-parity (planted: another build)";
  ch.send(0, Tag::hello, hello.dump());
  for (;;) {
    const Message m = ch.wait(0, {Tag::case_, Tag::end});
    if (m.tag == Tag::end) return 0;
    const json msg = json::parse(m.bytes);
    const int64_t seq = msg.at("seq").get<int64_t>();
    watchdog.arm(seq);
    try {
      serve_case(ch, part, faults, msg, seq);
    } catch (const std::exception& e) {
      part.observe(nullptr);
      watchdog.report_error(seq, e.what());
    }
    watchdog.disarm();
  }
}

}  // namespace

int run_mpi_session(const SessionOptions& o, const std::string& tool_version) {
  const bool cuda = o.backend == "cuda";
  const std::optional<RunOptions> opt = reference_run_options(o.backend);
  require(cuda || opt.has_value(), "--comm", "mpi runs the reference backends (reference, lowp, mutant:NAME) and cuda only");
  if (cuda)
    require(cuda_mpi_built(), "--comm", "mpi with backend cuda needs CUDA and NCCL in the build");
  const std::vector<PlantedFault> faults = planted_faults();  // a malformed one is bad usage, before MPI starts
  int provided = MPI_THREAD_SINGLE;
  mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  Finalizer finalize;
  if (provided < MPI_THREAD_MULTIPLE)
    throw Unavailable("the MPI library gives thread level " + std::to_string(provided) +
                      "; --comm mpi needs MPI_THREAD_MULTIPLE (rank 0 watches the other ranks while its own part runs)");
  Channel ch;
  // cuda: every rank picks its GPU and the choices are checked together (a refusal is the same on
  // every rank, before any case); the reference: MpiHostComm.
  std::unique_ptr<RankPart> part = cuda ? make_cuda_part() : make_reference_part(*opt);
  BeforeAbort release([p = part.get()] { p->abort(); });
  const json mine = identity(o, tool_version, ch.size());
  const int threads = threads_per_rank();
  if (ch.rank() == 0) return drive(o, ch, *part, threads, faults, mine);
  return serve(o, ch, *part, threads, faults, mine);
}

}  // namespace dsa
