#!/usr/bin/env bash
# The device runs of 2026-12-05 (12th session), as run then from an ignored scratch/ folder. Usage,
# in the device copy's root:
#   SHA=<commit> bash reports/device/2026-12-05-s12-device-run.sh STAGE...
# Everything lands in $OUT/w, packed into $OUT/r.tgz at the end (at most 8 files come back).
set -uo pipefail
W=$OUT/w; mkdir -p "$W"
B=build-dev
P="2026-12-05-s12-${SHA:-nosha}"
SEED=${SEED:-93}
t0=$SECONDS
log() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$W/stages.log"; }
finish() { cd "$OUT" && tar czf r.tgz w && rm -rf w; }
trap finish EXIT
D=$B/dsa-parity
for st in "$@"; do
  case $st in
    build)
      cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF >"$W/cmake.log" 2>&1 &&
        cmake --build $B -j16 --target dsa-parity fused_tests gpu_oracle_tests gpu_oracle_bench check_tests harness_tests >"$W/build.log" 2>&1 ||
        { log "build FAILED"; tail -40 "$W/build.log"; exit 1; }
      log "build" ;;
    buildboth)  # this tree and the baseline in scratch/base (a git archive of BASE), side by side
      ( cmake -S scratch/base -B build-base -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF >"$W/cmake-base.log" 2>&1 &&
        cmake --build build-base -j7 --target dsa-parity >"$W/build-base.log" 2>&1; echo $? >"$W/base.rc" ) &
      cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF >"$W/cmake.log" 2>&1 &&
        cmake --build $B -j9 --target dsa-parity fused_tests gpu_oracle_tests gpu_oracle_bench check_tests harness_tests >"$W/build.log" 2>&1 ||
        { log "build FAILED"; tail -40 "$W/build.log"; wait; exit 1; }
      log "build"; wait; log "baseline build rc $(cat "$W/base.rc")"; tail -3 "$W/build-base.log" ;;
    gate)  # stop here unless the oracle/judge/prefetch tests passed
      grep -q "oracle/judge/prefetch tests rc 0" "$W/stages.log" || { log "gate: tests failed, stopping"; exit 1; } ;;
    caseallinbase)
      build-base/dsa-parity bench --benchmark_filter='BM_CaseAllIn' --benchmark_out="$W/$P-bench-case-all-in-base-${BASE:-base}.json" >"$W/bench-case-base.txt" 2>&1
      log "case all-in baseline ${BASE:-base} rc $?"; grep -E "^BM_" "$W/bench-case-base.txt" | cut -c1-260 ;;
    tests)
      $B/fused/fused_tests >"$W/$P-fused-tests.log" 2>&1; log "fused_tests rc $?"; grep -E "FAILED|PASSED" "$W/$P-fused-tests.log" | head -8 ;;
    oracletests)
      { $B/check/gpu/gpu_oracle_tests; $B/check/check_tests --gtest_filter='Judge*:OracleBoth*'; \
        $B/harness/harness_tests --gtest_filter='CasePrefetch*:RunCase*:CudaCases*:CudaBackend*'; } >"$W/$P-oracle-tests.log" 2>&1
      log "oracle/judge/prefetch tests rc $?"; grep -E "PASSED|FAILED|SKIPPED" "$W/$P-oracle-tests.log" | head -12 ;;
    repro2258)
      $D repro reports/device/2026-12-05-s10-seed95-case2258.json --backend cuda --oracle gpu >"$W/$P-repro-seed95-case2258.txt" 2>&1
      log "repro seed95 case 2258 rc $?"; grep -E "^(pass|fail) |loss +(kl|loss) " "$W/$P-repro-seed95-case2258.txt" | head -4 ;;
    oraclebench)
      $B/check/gpu/gpu_oracle_bench >"$W/$P-gpu-oracle-bench.json" 2>"$W/oracle-bench.err"; log "gpu oracle bench rc $?"
      cut -c1-330 "$W/$P-gpu-oracle-bench.json" ;;
    benches)
      $D bench --benchmark_filter='BM_FusedAttention(Forward|Backward)/model:[01]/S:4096/' --benchmark_out="$W/$P-bench-fused-attention.json" >"$W/bench-fused.txt" 2>&1
      log "fused bench rc $?"; grep -E "^BM_" "$W/bench-fused.txt" | cut -c1-200
      $D bench --benchmark_filter='Reference(Forward|Backward|IndexerLoss|Core)/S:1024|EigenGemmF64Rows/S:1024' --benchmark_out="$W/$P-reference-bench-h200-host.json" >"$W/bench-ref.txt" 2>&1
      log "reference bench rc $?"; grep -E "^(Ref|Eigen)" "$W/bench-ref.txt" | cut -c1-220 ;;
    caseallin)
      $D bench --benchmark_filter='BM_CaseAllIn' --benchmark_out="$W/$P-bench-case-all-in.json" >"$W/bench-case.txt" 2>&1
      log "case all-in rc $?"; grep -E "^BM_" "$W/bench-case.txt" | cut -c1-260 ;;
    gpu|cpu)
      $D fuzz --backend cuda --oracle $st --profile nightly --seed $SEED --time-budget ${BUDGET:-300} --progress-every 60 \
        --report "$W/$P-fuzz-nightly-$st-seed$SEED.json" >"$W/$P-fuzz-nightly-$st-seed$SEED.log" 2>&1
      log "nightly $st rc $?"; grep -E "^[0-9]+ cases:|^coverage|^case time|FAIL" "$W/$P-fuzz-nightly-$st-seed$SEED.log" | head -12 ;;
    both)
      $D fuzz --backend cuda --oracle both --profile nightly --seed $SEED --time-budget ${BOTH_BUDGET:-60} --progress-every 60 \
        --report "$W/$P-fuzz-nightly-both-seed$SEED.json" >"$W/$P-fuzz-nightly-both-seed$SEED.log" 2>&1
      log "both rc $?"; grep -E "^[0-9]+ cases:|disagree|^case time" "$W/$P-fuzz-nightly-both-seed$SEED.log" | head -8 ;;
    production)
      $D fuzz --backend cuda --oracle gpu --profile production --seed $SEED --time-budget ${PROD_BUDGET:-300} --progress-every 60 \
        --report "$W/$P-fuzz-production-seed$SEED.json" >"$W/$P-fuzz-production-seed$SEED.log" 2>&1
      log "production rc $?"; grep -E "^[0-9]+ cases:|^coverage|^case time|FAIL" "$W/$P-fuzz-production-seed$SEED.log" | head -12 ;;
    *) log "unknown stage $st"; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$W/nvidia-smi.csv" 2>&1
