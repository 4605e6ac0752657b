#!/bin/bash
# One device call of engineer k2 (issue 4): build, GPU tests, planted-bug builds, fuzz, replay, bench.
# Usage on the device machine, from a checkout: OUT=<folder> NIGHTLY_S=100 PROD_S=45 reports/device/k2-device-run.sh
set -o pipefail
NIGHTLY_S=${NIGHTLY_S:-100}
PROD_S=${PROD_S:-45}
J=${J:-16}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > $OUT/build.log 2>&1 &&
  cmake --build build -j$J --target fused_tests harness_tests dsa-parity >> $OUT/build.log 2>&1 ||
  { grep -E "error|undefined" $OUT/build.log | head -40; }

# Planted kernel bugs (README "Planted kernel bugs"), each compiled in through CMake on its own
# (tools/kernel_mutants.sh) and run against the tests that must catch it.
tools/kernel_mutants.sh > $OUT/plants.log 2>&1 &
PLANTS=$!

{
  echo "== fused_tests"; timeout 120 ./build/fused/fused_tests
  echo "== harness_tests (cuda)"; timeout 120 ./build/harness/harness_tests --gtest_filter='Cuda*'
} > $OUT/tests.log 2>&1
grep -E "PASSED|FAILED|Failure|spread" $OUT/tests.log

{
  echo "== fuzz nightly ${NIGHTLY_S}s"
  ./build/dsa-parity fuzz --backend cuda --profile nightly --seed 4 --time-budget $NIGHTLY_S --report $OUT/fuzz-nightly.json
  echo "exit $?"
  echo "== fuzz production ${PROD_S}s"
  ./build/dsa-parity fuzz --backend cuda --profile production --seed 4 --time-budget $PROD_S --report $OUT/fuzz-production.json
  echo "exit $?"
  echo "== replay cases/"
  ./build/dsa-parity replay cases/ --backend cuda --report $OUT/replay.json
  echo "exit $?"
} > $OUT/fuzz.log 2>&1
tail -n 30 $OUT/fuzz.log

wait $PLANTS
grep -E "^mutant" $OUT/plants.log

timeout 240 ./build/dsa-parity bench --benchmark_filter='Fused' --benchmark_out=$OUT/bench.json \
  --benchmark_out_format=json 2>&1
