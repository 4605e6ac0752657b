#!/usr/bin/env bash
# Session 14 device runs. SHA=<commit> SEED=<seed> bash scratch/s14-run.sh STAGE...
set -uo pipefail
W=$OUT/w; mkdir -p "$W"
B=build-dev
P="2026-12-06-s14-${SHA:-nosha}"
SEED=${SEED:-99}
t0=$SECONDS
log() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$W/stages.log"; }
trap 'cd $OUT && tar czf r.tgz w && rm -rf w' EXIT
D=$B/dsa-parity
C1741=reports/device/2026-12-05-s12-f65e6dd-fuzz-nightly-gpu-seed97-cases/20261205T123758Z-1300-seed97/case-1741.json
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$W/$P-nvidia-smi.csv" 2>&1
for st in "$@"; do
  case $st in
    build)
      cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF >"$W/cmake.log" 2>&1 &&
        cmake --build $B -j18 --target dsa-parity gpu_oracle_tests check_tests harness_tests >"$W/build.log" 2>&1 ||
        { log "build FAILED"; tail -40 "$W/build.log"; exit 1; }
      log "build" ;;
    tests)
      rc=0
      { $B/check/gpu/gpu_oracle_tests || rc=1; $B/check/check_tests --gtest_filter='Judge*:OracleBoth*' || rc=1; \
        $B/harness/harness_tests --gtest_filter='CasePrefetch*:RunCase*:CudaCases*:CudaBackend*' || rc=1; } >"$W/$P-oracle-tests.log" 2>&1
      log "oracle/judge/prefetch tests rc $rc"; grep -E "PASSED|FAILED|SKIPPED" "$W/$P-oracle-tests.log" | head -12
      [ $rc = 0 ] || { log "tests failed: stopping"; exit 1; } ;;
    refbench)
      DSA_TRACE=$W/$P-trace-reference-bench.json $D bench --benchmark_filter='(Reference|EigenGemm).*/S:1024' \
        --benchmark_out="$W/$P-reference-bench.json" >"$W/refbench.txt" 2>&1
      log "reference bench rc $?"; grep -E "^(Ref|Eig)" "$W/refbench.txt" | cut -c1-250 ;;
    export1741)
      $D export $C1741 --out "$W/c1741" --backend cuda --comm local >"$W/export1741.txt" 2>&1
      log "export 1741 rc $?"; cat "$W/export1741.txt" | head -5 ;;
    caseallin)
      $D bench --benchmark_filter='BM_CaseAllIn' --benchmark_out="$W/$P-bench-case-all-in.json" >"$W/bench-case.txt" 2>&1
      log "case all-in rc $?"; grep -E "^BM_" "$W/bench-case.txt" | cut -c1-300 ;;
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
