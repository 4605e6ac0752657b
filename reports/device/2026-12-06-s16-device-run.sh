#!/usr/bin/env bash
# Session 16 device runs. SHA=<commit> SEED=<seed> bash scratch/s16-run.sh STAGE...
set -uo pipefail
W=$OUT/w; mkdir -p "$W"
[ -n "${SHA:-}" ] && export DSA_GIT_SHA=$SHA  # the device checkout's git HEAD is the last landed commit, not this tree
B=build-dev
P="2026-12-06-s16-${SHA:-nosha}"
SEED=${SEED:-99}
t0=$SECONDS
log() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$W/stages.log"; }
trap 'cd $OUT && tar czf r.tgz w && rm -rf w' EXIT
D=$B/dsa-parity
C33=reports/device/2026-12-06-s15-5a96aaa-fuzz-production-seed101-cases/20261206T052024Z-27175-seed101/case-33.json
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$W/$P-nvidia-smi.csv" 2>&1
for st in "$@"; do
  case $st in
    buildfused)
      cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF >"$W/cmake.log" 2>&1 &&
        cmake --build $B -j18 --target fused_tests >"$W/build.log" 2>&1 ||
        { log "build FAILED"; tail -40 "$W/build.log"; exit 1; }
      log "build fused_tests" ;;
    projtests)
      $B/fused/fused_tests --gtest_filter='Projections.*' >"$W/$P-projections-tests.log" 2>&1
      log "projections tests rc $?"; grep -E "OK|FAILED|Failure|miss|=" "$W/$P-projections-tests.log" | head -40 ;;
    fusedtests)
      $B/fused/fused_tests >"$W/$P-fused-tests.log" 2>&1
      log "fused tests rc $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)" "$W/$P-fused-tests.log" | head -20 ;;
    build)
      cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF >"$W/cmake.log" 2>&1 &&
        cmake --build $B -j18 --target dsa-parity gpu_oracle_tests check_tests harness_tests fused_tests >"$W/build.log" 2>&1 ||
        { log "build FAILED"; tail -40 "$W/build.log"; exit 1; }
      log "build" ;;
    tests)
      rc=0
      { $B/check/gpu/gpu_oracle_tests || rc=1; $B/check/check_tests --gtest_filter='Judge*:OracleBoth*' || rc=1; \
        $B/harness/harness_tests --gtest_filter='CasePrefetch*:RunCase*:CudaCases*:CudaBackend*:DeviceNormals*:NormalBf16*' || rc=1;
        $B/fused/fused_tests --gtest_filter='Projections.*:Run*:Comm*' || rc=1; } >"$W/$P-oracle-tests.log" 2>&1
      log "oracle/judge/prefetch tests rc $rc"; grep -E "PASSED|FAILED|SKIPPED" "$W/$P-oracle-tests.log" | head -12
      [ $rc = 0 ] || { log "tests failed: stopping"; exit 1; } ;;
    refbench)
      DSA_TRACE=$W/$P-trace-reference-bench.json $D bench --benchmark_filter='(Reference|EigenGemm).*/S:1024' \
        --benchmark_out="$W/$P-reference-bench.json" >"$W/refbench.txt" 2>&1
      log "reference bench rc $?"; grep -E "^(Ref|Eig)" "$W/refbench.txt" | cut -c1-250 ;;
    repro33)
      $D repro $C33 --backend cuda --oracle gpu --report "$W/$P-repro-production-seed101-case33.json" >"$W/$P-repro-case33.log" 2>&1
      log "repro case 33 rc $?"; tail -5 "$W/$P-repro-case33.log" ;;
    flashmla)
      [ -d .flashmla/cutlass/include ] || tar -xJf scratch/flashmla.tar.xz
      OUT=$W/flashmla B=$PWD/$B bash scratch/flashmla_side.sh >/dev/null 2>&1
      log "flashmla side rc $?"; grep -E "TFLOP|ratio|tflops|BM_Fused" "$W/flashmla/side.log" | cut -c1-200 | head -40 ;;
    fusedbench)
      $D bench --benchmark_filter="${BENCH_FILTER:-BM_Fused}" --benchmark_out="$W/$P-bench-fused.json" >"$W/bench-fused.txt" 2>&1
      log "fused bench rc $?"; grep -E "^BM_" "$W/bench-fused.txt" | cut -c1-220 ;;
    caseallin)
      $D bench --benchmark_filter='BM_CaseAllIn' --benchmark_out="$W/$P-bench-case-all-in.json" >"$W/bench-case.txt" 2>&1
      log "case all-in rc $?"; grep -E "^BM_" "$W/bench-case.txt" | cut -c1-300 ;;
    caseallinhost)
      DSA_GENERATE=host $D bench --benchmark_filter='BM_CaseAllIn' --benchmark_out="$W/$P-bench-case-all-in-host-generation.json" >"$W/bench-case-host.txt" 2>&1
      log "case all-in (DSA_GENERATE=host) rc $?"; grep -E "^BM_" "$W/bench-case-host.txt" | cut -c1-300 ;;
    tracecase)
      DSA_TRACE=$W/trace-caseallin.json $D bench --benchmark_filter='BM_CaseAllIn/model:0' >"$W/bench-case-traced.txt" 2>&1
      log "traced case all-in rc $?"; grep -E "^BM_" "$W/bench-case-traced.txt" | cut -c1-300
      python3 scratch/trace_summary.py "$W/trace-caseallin.json" >"$W/$P-trace-caseallin-summary.txt"; head -30 "$W/$P-trace-caseallin-summary.txt"
      gzip "$W/trace-caseallin.json" ;;
    trace)
      DSA_TRACE=$W/trace.json $D fuzz --backend cuda --oracle gpu --profile nightly --seed $((SEED + 1000)) --time-budget ${TRACE_BUDGET:-40} \
        --report "$W/trace-fuzz.json" >"$W/trace-fuzz.log" 2>&1
      log "traced nightly rc $?"; grep -E "^[0-9]+ cases:|^case time|wall" "$W/trace-fuzz.log" | head -5
      python3 scratch/trace_summary.py "$W/trace.json" >"$W/$P-trace-summary.txt"; head -40 "$W/$P-trace-summary.txt"
      gzip "$W/trace.json" ;;
    gpu|cpu)
      $D fuzz --backend cuda --oracle $st --profile nightly --seed $SEED --time-budget ${BUDGET:-300} --progress-every 60 \
        --report "$W/$P-fuzz-nightly-$st-seed$SEED.json" >"$W/$P-fuzz-nightly-$st-seed$SEED.log" 2>&1
      log "nightly $st rc $?"; grep -E "^[0-9]+ cases:|^coverage|^case time|FAIL" "$W/$P-fuzz-nightly-$st-seed$SEED.log" | head -12 ;;
    both)
      $D fuzz --backend cuda --oracle both --profile nightly --seed $SEED --time-budget ${BOTH_BUDGET:-60} --progress-every 60 \
        --report "$W/$P-fuzz-nightly-both-seed$SEED.json" >"$W/$P-fuzz-nightly-both-seed$SEED.log" 2>&1
      log "both rc $?"; grep -E "^[0-9]+ cases:|disagree|agree|^case time" "$W/$P-fuzz-nightly-both-seed$SEED.log" | head -8 ;;
    production)
      $D fuzz --backend cuda --oracle gpu --profile production --seed $SEED --time-budget ${PROD_BUDGET:-300} --progress-every 60 \
        --report "$W/$P-fuzz-production-seed$SEED.json" >"$W/$P-fuzz-production-seed$SEED.log" 2>&1
      log "production rc $?"; grep -E "^[0-9]+ cases:|^coverage|^case time|FAIL" "$W/$P-fuzz-production-seed$SEED.log" | head -12 ;;
    *) log "unknown stage $st"; exit 2 ;;
  esac
done
