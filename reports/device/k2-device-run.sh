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

# Planted kernel bugs (README "Planted kernel bugs"), each compiled in on its own and run against
# the tests that must catch it; in the background while the GPU tests and the fuzz run.
plants() {
  local inc="-I. -I/usr/include/eigen3 -I/usr/local/cuda/include"
  for P in causal_end_off_by_one neg1_read_as_row0 trust_noncausal_indices base2_lse_backward dq_missing_scale dlogit_missing_delta; do
    ( /usr/local/cuda/bin/nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -I. -DDSA_MUTANT_$P=1 fused/attention_select.cu fused/attention_fwd.cu fused/attention_fwd_sm90.cu \
        fused/attention_bwd.cu fused/device.cu fused/attention_test.cpp -lgtest -lgtest_main -o /tmp/plant_$P > /tmp/plant_$P.build 2>&1 ) &
  done
  g++ -std=c++20 -O2 $inc -c fused/run_test.cpp -o /tmp/run_test.o
  local objs=$(ls build/fused/CMakeFiles/dsa_fused.dir/*.o build/fused/CMakeFiles/dsa_fused.dir/comm/*.o | grep -v '/run.cpp.o')
  for P in zigzag_chunk_swap no_key_grad_reduce_scatter; do
    ( g++ -std=c++20 -O2 $inc -DDSA_HAVE_NCCL=1 -DDSA_MUTANT_$P=1 -c fused/run.cpp -o /tmp/run_$P.o &&
      g++ /tmp/run_test.o /tmp/run_$P.o $objs build/reference/libdsa_reference.a -L/usr/local/cuda/lib64 -lcudart -lcublas \
        -lnccl -lgtest -lgtest_main -fopenmp -lpthread -o /tmp/plant_$P > /tmp/plant_$P.build 2>&1 ) &
  done
  wait
}
plants > $OUT/plants.log 2>&1 &
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
{
  for P in causal_end_off_by_one neg1_read_as_row0 trust_noncausal_indices base2_lse_backward dq_missing_scale dlogit_missing_delta \
           zigzag_chunk_swap no_key_grad_reduce_scatter; do
    if [ ! -x /tmp/plant_$P ]; then echo "plant $P: BUILD FAILED"; tail -5 /tmp/plant_$P.build; continue; fi
    if [[ $P == zigzag* || $P == no_key* ]]; then F='RunFused.*'; else F='Shapes/*'; fi
    timeout 60 /tmp/plant_$P --gtest_filter="$F" > /tmp/plant_$P.log 2>&1
    rc=$?
    echo "plant $P: exit $rc ($([ $rc -ne 0 ] && echo CAUGHT || echo MISSED)); failing tests: $(grep -c '^\[  FAILED  \] ' /tmp/plant_$P.log)"
    grep -E '^\[  FAILED  \] [A-Za-z]' /tmp/plant_$P.log | head -8
  done
} >> $OUT/plants.log 2>&1
grep -E "^plant" $OUT/plants.log

timeout 240 ./build/dsa-parity bench --benchmark_filter='Fused' --benchmark_out=$OUT/bench.json \
  --benchmark_out_format=json 2>&1
