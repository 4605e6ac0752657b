#!/bin/bash
# One device call (issue 4): build, then the stages named in STAGES, each writing under $OUT.
# Usage on the device machine, from a checkout:
#   OUT=<folder> STAGES="tests bench fuzz production replay" NIGHTLY_S=280 SEED=11 reports/device/device-run.sh
# Stages: tests (fused_tests, the cuda harness tests and the cuda CLI tests), fwdbench (attention forward only, S = 4096),
# bench (every fused benchmark), fuzz (nightly for NIGHTLY_S seconds), production (PROD_S seconds),
# replay (the corpus cases/). A build already in build/ is reused (the machine keeps it while warm).
set -o pipefail
export NCCL_NVLS_ENABLE=0
NIGHTLY_S=${NIGHTLY_S:-280}
PROD_S=${PROD_S:-60}
SEED=${SEED:-11}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > $OUT/build.log 2>&1 &&
  cmake --build build -j16 --target fused_tests harness_tests tool_tests dsa-parity >> $OUT/build.log 2>&1 ||
  { grep -E "error|undefined" $OUT/build.log | head -40; exit 1; }
echo "built $(date -u +%T)"
for stage in $STAGES; do
  echo "== $stage $(date -u +%T)"
  case $stage in
    tests)
      timeout 180 ./build/fused/fused_tests 2>&1 | tee $OUT/fused-tests.log | grep -E "PASSED|FAILED|Failure|SKIPPED|spread|Expected|Which|got" | head -40
      timeout 120 ./build/harness/harness_tests --gtest_filter='Cuda*' 2>&1 | tee $OUT/harness-cuda-tests.log | grep -E "PASSED|FAILED|Failure"
      timeout 120 ./build/tools/tool_tests --gtest_filter='Cli.Cuda*' 2>&1 | tee $OUT/cli-cuda-tests.log | grep -E "PASSED|FAILED|Failure|SKIPPED" ;;
    fwdbench)
      ./build/dsa-parity bench --benchmark_filter='AttentionForward.*S:4096' 2>&1 | grep -E "BM_|rror" ;;
    bench)
      ./build/dsa-parity bench --benchmark_out=$OUT/bench.json --benchmark_out_format=json 2>&1 | grep -E "BM_|rror" ;;
    fuzz)
      ./build/dsa-parity fuzz --backend cuda --profile nightly --seed $SEED --time-budget $NIGHTLY_S \
        --report $OUT/fuzz-nightly.json > $OUT/fuzz-nightly.log 2>&1; echo "exit $?"; tail -8 $OUT/fuzz-nightly.log ;;
    production)
      ./build/dsa-parity fuzz --backend cuda --profile production --seed $SEED --time-budget $PROD_S \
        --report $OUT/fuzz-production.json > $OUT/fuzz-production.log 2>&1; echo "exit $?"; tail -6 $OUT/fuzz-production.log ;;
    replay)
      ./build/dsa-parity replay cases/ --backend cuda --report $OUT/replay.json > $OUT/replay.log 2>&1; echo "exit $?"
      tail -6 $OUT/replay.log ;;
  esac
done
echo "done $(date -u +%T)"
