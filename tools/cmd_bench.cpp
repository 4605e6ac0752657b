// dsa-parity bench: Google Benchmark over every BENCHMARK registered in this binary (the CPU
// reference's in bench_reference.cpp, the fused kernels' in bench_fused.cpp when built with CUDA).
// Every argument after `bench` goes to Google Benchmark (--benchmark_filter=..., --benchmark_format=json, ...).
#include <benchmark/benchmark.h>

#include "tools/command.hpp"

namespace dsa::cli {
namespace {

int run(int argc, char** argv) {
  // argv[0] is "bench": Google Benchmark takes it as the program name.
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

RegisterCommand reg({"bench", "[Google Benchmark flags, e.g. --benchmark_filter=Fused --benchmark_format=json]",
                     "benchmark the CPU reference and (with CUDA) the fused kernels: time, TFLOP/s, speed-up", run});

}  // namespace
}  // namespace dsa::cli
