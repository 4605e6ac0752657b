#!/usr/bin/env bash
# Session 15 device runs. SHA=<commit> SEED=<seed> bash scratch/s15-run.sh STAGE...
set -uo pipefail
W=$OUT/w; mkdir -p "$W"
[ -n "${SHA:-}" ] && export DSA_GIT_SHA=$SHA  # the device checkout's git HEAD is the last landed commit, not this tree
B=build-dev
P="2026-12-06-s15-${SHA:-nosha}"
SEED=${SEED:-99}
t0=$SECONDS
log() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$W/stages.log"; }
trap 'cd $OUT && tar czf r.tgz w && rm -rf w' EXIT
D=$B/dsa-parity
C1741=reports/device/2026-12-05-s12-f65e6dd-fuzz-nightly-gpu-seed97-cases/20261205T123758Z-1300-seed97/case-1741.json
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$W/$P-nvidia-smi.csv" 2>&1
for st in "$@"; do
  case $st in
    probe)
      nvcc -O1 -arch=sm_90a -o "$W/gemm_probe" scratch/gemm_probe.cu -lcublasLt -lcublas >"$W/probe-build.log" 2>&1 &&
        "$W/gemm_probe" >"$W/$P-gemm-probe.txt" 2>&1
      log "probe rc $?"; rm -f "$W/gemm_probe"; grep -c WRONG "$W/$P-gemm-probe.txt"; grep WRONG "$W/$P-gemm-probe.txt" | head -30 ;;
    probe2)
      nvcc -O1 -arch=sm_90a -o "$W/gemm_probe2" scratch/gemm_probe2.cu -lcublas >"$W/probe2-build.log" 2>&1 &&
        "$W/gemm_probe2" >"$W/$P-gemm-probe2.txt" 2>&1
      log "probe2 rc $?"; rm -f "$W/gemm_probe2"; tail -4 "$W/$P-gemm-probe2.txt"; grep WRONG "$W/$P-gemm-probe2.txt" | grep -v "bf16 " | head; grep "bf16 " "$W/$P-gemm-probe2.txt" | awk '{print $8}' | tr '\n' ' ' | head -c 1500; echo ;;
    probe3)
      nvcc -O1 -arch=sm_90a -o "$W/gemm_probe3" scratch/gemm_probe3.cu -lcublas >"$W/probe3-build.log" 2>&1 &&
        "$W/gemm_probe3" >"$W/$P-gemm-probe3.txt" 2>&1
      log "probe3 rc $?"; rm -f "$W/gemm_probe3"; cat "$W/$P-gemm-probe3.txt" | head -40 ;;
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
    export1741)
      $D export $C1741 --out "$W/c1741" --backend cuda --comm local >"$W/export1741.txt" 2>&1
      log "export 1741 rc $?"; cat "$W/export1741.txt" | head -5 ;;
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
