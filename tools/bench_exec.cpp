// BM_ExecProtocolOverhead: the per-case cost of the exec protocols themselves (README "External
// backends"), v1 (exec:CMD, one process per case) against v2 (exec2:CMD, one persistent worker),
// on a tiny case with a trivial python worker that writes an empty outputs file. Arg 1 = v1,
// Arg 2 = v2; the v2 worker's start and handshake happen before the timed loop (counter
// startup_s). Runs python3 from PATH, or $DSA_BENCH_PYTHON; skipped without one.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "harness/backend.hpp"
#include "harness/run_case.hpp"

namespace dsa::bench_exec {
namespace {

// One script, both protocols: with a FOLDER argument it is a v1 command, without one a v2 worker.
const char* const kWorker = R"(import json, os, struct, sys
def empty(folder):
    with open(os.path.join(folder, "outputs.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 8) + b"{}      ")
if len(sys.argv) > 1:
    empty(sys.argv[1])
    sys.exit(0)
for line in sys.stdin:
    m = json.loads(line)
    if m["type"] == "hello":
        print(json.dumps({"type": "capabilities", "protocol": 2, "name": "trivial",
                          "stages": ["indexer", "attention", "attention_backward", "loss", "loss_backward"],
                          "dtypes": ["F32", "I32"], "cp": True, "max_tokens": 1 << 20,
                          "paths": ["absorbed", "explicit"]}), flush=True)
    elif m["type"] == "run":
        empty(m["folder"])
        print(json.dumps({"type": "done", "id": m["id"]}), flush=True)
    else:
        break
)";

std::string worker_script() {
  static const std::string path = [] {
    const std::string p =
        (std::filesystem::temp_directory_path() / ("dsa-bench-exec-worker-" + std::to_string(getpid()) + ".py"))
            .string();
    std::ofstream(p) << kWorker;
    return p;
  }();
  return path;
}

void BM_ExecProtocolOverhead(benchmark::State& state) {
  const char* py_env = std::getenv("DSA_BENCH_PYTHON");
  const std::string py = py_env && *py_env ? py_env : "python3";
  if (std::system((py + " -c pass >/dev/null 2>&1").c_str()) != 0) {
    state.SkipWithError("python3 not found");
    return;
  }
  const int version = int(state.range(0));
  Case c;
  c.seed = 1;
  c.problem.seqlens = {4};
  c.problem.topk = 2;
  c.problem.dims = {2, 4, 2, 4, 4, 2, 4};
  c.problem.softmax_scale = 0.3;
  const PreparedCase pc = prepare_case(c);
  const std::string cmd = py + " " + worker_script();
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Backend> b = make_backend((version == 1 ? "exec:" : "exec2:") + cmd);
  const double startup = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto _ : state) benchmark::DoNotOptimize(b->run(c, pc));
  state.counters["startup_s"] = startup;
  state.SetLabel(version == 1 ? "v1 exec: process per case" : "v2 exec2: persistent worker");
}

BENCHMARK(BM_ExecProtocolOverhead)->ArgName("protocol")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace
}  // namespace dsa::bench_exec
