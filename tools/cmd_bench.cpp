// dsa-parity bench: Google Benchmark over every BENCHMARK registered in this binary (the CPU
// reference's in bench_reference.cpp, the exec protocols' in bench_exec.cpp, the fused kernels' in
// bench_fused.cpp when built with CUDA). The common Google Benchmark flags are documented here;
// any other --benchmark_* flag is passed through as given.
#include <benchmark/benchmark.h>

#include <initializer_list>
#include <regex>

#include "core/errors.hpp"
#include "harness/backend.hpp"
#include "tools/bench_fused_names.hpp"
#include "tools/command.hpp"

namespace dsa::cli {
namespace {
namespace cmd_bench {  // its own names in a unity build (README "Layout of the source")

// The GPU benchmarks of bench_fused.cpp (compiled only with CUDA; their names in
// tools/bench_fused_names.hpp), with the arguments they run at: a filter that selects any of them
// needs a device.
std::vector<std::string> gpu_benchmark_names() {
  using namespace fused_bench;
  std::vector<std::string> names;
  auto add = [&](const char* base, const auto& seqlens) {
    for (const char* model : {"0", "1"})
      for (int S : seqlens) names.push_back(std::string(base) + "/model:" + model + "/S:" + std::to_string(S) + "/manual_time");
  };
  for (const Kernel& k : kKernels) add(k.name, kSeqLens);
  add(kHotKeys, kHotSeqLens);
  add(kCoreVsCpu, std::initializer_list<int>{kCoreVsCpuSeqLen});
  return names;
}

// The GPU benchmarks a --benchmark_filter selects, as Google Benchmark matches it (a regular
// expression searched in the name; a leading '-' negates it). Empty when the filter is not a
// valid expression (Google Benchmark then says so itself).
std::vector<std::string> selected_gpu_benchmarks(std::string filter) {
  bool negative = false;
  if (filter.empty() || filter == "all") filter = ".";
  if (filter[0] == '-') {
    negative = true;
    filter = filter.substr(1);
  }
  std::vector<std::string> out;
  try {
    const std::regex re(filter, std::regex::extended);
    for (auto& n : gpu_benchmark_names())
      if (std::regex_search(n, re) != negative) out.push_back(n.substr(0, n.find('/')));
  } catch (const std::regex_error&) {
    return {};
  }
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

struct Flags {
  std::string filter, format, out, out_format, repetitions, min_time;
  bool list_tests = false;
};

Run setup(CLI::App& app) {
  auto f = std::make_shared<Flags>();
  add_value(app, "--benchmark_filter", f->filter,
            "run the benchmarks whose name matches REGEX (a leading - excludes them); without a CUDA device, a "
            "filter that selects a GPU benchmark (BM_Fused*) is exit 3",
            "REGEX", "all");
  add_value(app, "--benchmark_format", f->format, "the terminal output's format", "console|json|csv", "console")
      ->check(one_of({"console", "json", "csv"}));
  add_value(app, "--benchmark_out", f->out, "also write the results to FILE (default: none)", "FILE");
  add_value(app, "--benchmark_out_format", f->out_format, "the format of --benchmark_out", "console|json|csv",
            "json")
      ->check(one_of({"console", "json", "csv"}));
  add_value(app, "--benchmark_repetitions", f->repetitions, "run every benchmark N times (mean, median, stddev)",
            "N", "1")
      ->check(integer_at_least(1));
  add_value(app, "--benchmark_min_time", f->min_time,
            "the minimum time per benchmark, in seconds (benchmarks with fixed iterations ignore it)", "SEC", "0.5")
      ->check(seconds_value());
  add_switch(app, "--benchmark_list_tests", f->list_tests, "list the benchmarks (as filtered) without running them");
  return [f, &app] {
    // Flags of Google Benchmark not documented above are passed through; anything else is refused.
    std::vector<std::string> args = {"dsa-parity bench"};
    for (const std::string& a : app.remaining()) {
      if (a.rfind("--benchmark_", 0) != 0 && a.rfind("--v=", 0) != 0)
        throw InvalidInput(a.substr(0, a.find('=')),
                           a[0] == '-' ? "unknown flag for this subcommand (see dsa-parity help bench)"
                                       : "bench takes no positional argument");
      args.push_back(a);
    }
    const std::pair<const char*, const std::string*> values[] = {
        {"filter", &f->filter}, {"format", &f->format}, {"out", &f->out}, {"out_format", &f->out_format},
        {"repetitions", &f->repetitions}, {"min_time", &f->min_time}};
    for (auto& [name, v] : values)
      if (app.count(std::string("--benchmark_") + name)) args.push_back(std::string("--benchmark_") + name + "=" + *v);
    if (f->list_tests) args.push_back("--benchmark_list_tests=true");
    if (!f->list_tests && !cuda_device_present()) {
      const std::vector<std::string> gpu = selected_gpu_benchmarks(f->filter);
      if (!gpu.empty() && app.count("--benchmark_filter")) {
        std::string names;
        for (auto& n : gpu) names += (names.empty() ? "" : ", ") + n;
        throw Unavailable("--benchmark_filter selects GPU benchmarks (" + names +
                          ") and no CUDA device is present; the CPU ones run without one "
                          "(e.g. --benchmark_filter=Reference)");
      }
#ifdef DSA_HAVE_CUDA
      if (!gpu.empty())
        std::fprintf(stderr, "dsa-parity bench: no CUDA device: the GPU benchmarks (BM_Fused*) are skipped\n");
#endif
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    int argc = int(argv.size());
    argv.push_back(nullptr);
    benchmark::Initialize(&argc, argv.data());
    if (benchmark::ReportUnrecognizedArguments(argc, argv.data())) return 2;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  };
}

RegisterCommand reg({"bench", "benchmark the CPU reference and (with CUDA) the fused kernels: time, TFLOP/s, speed-up",
                     "  dsa-parity bench --benchmark_filter=Reference --benchmark_format=json\n"
                     "  dsa-parity bench --benchmark_filter=Fused --benchmark_out=fused.json",
                     setup});

}  // namespace cmd_bench
}  // namespace
}  // namespace dsa::cli
