#!/usr/bin/env bash
# Session 13, device call 1: build; case 1741 with the input check and under memcheck; BM_CaseAllIn V3.2 traced.
set -uo pipefail
W=$OUT/w; mkdir -p "$W"; t0=$SECONDS
log() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$W/stages.log"; }
trap 'cd $OUT && tar czf r.tgz w && rm -rf w' EXIT
B=build-dev
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$W/nvidia-smi.csv" 2>&1
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF >"$W/cmake.log" 2>&1 &&
  cmake --build $B -j18 --target dsa-parity >"$W/build.log" 2>&1 || { log "build FAILED"; tail -30 "$W/build.log"; exit 1; }
log build
D=$B/dsa-parity
f=scratch/c97/case-1741.json
DSA_FUSED_CHECK_INPUTS=1 $D repro $f --backend cuda --oracle cpu --comm local >"$W/case1741-checkinputs.txt" 2>&1; echo "rc $?" >>"$W/case1741-checkinputs.txt"
log "case 1741 input check: $(grep -E 'DSA_FUSED|^(pass|fail) |dW_UV ' "$W/case1741-checkinputs.txt" | head -4 | cut -c1-200 | tr '\n' '|')"
timeout 170 compute-sanitizer --tool memcheck --print-limit 20 $D repro $f --backend cuda --oracle cpu --comm local >"$W/case1741-memcheck.txt" 2>&1; echo "rc $?" >>"$W/case1741-memcheck.txt"
log "case 1741 memcheck: $(grep -E 'ERROR SUMMARY|Invalid|dW_UV ' "$W/case1741-memcheck.txt" | head -6 | cut -c1-200 | tr '\n' '|')"
DSA_TRACE=$W/trace-caseallin-v32.json $D bench --benchmark_filter='BM_CaseAllIn/model:0' --benchmark_out="$W/bench-case-all-in.json" >"$W/bench-case.txt" 2>&1
log "case all-in rc $?"; grep -E "^BM_" "$W/bench-case.txt" | cut -c1-260
if [ "${INITCHECK:-0}" = 1 ]; then
  timeout 200 compute-sanitizer --tool initcheck --print-limit 20 $D repro $f --backend cuda --oracle cpu --comm local >"$W/case1741-initcheck.txt" 2>&1; echo "rc $?" >>"$W/case1741-initcheck.txt"
  log "case 1741 initcheck: $(grep -E 'ERROR SUMMARY|Uninitialized' "$W/case1741-initcheck.txt" | head -4 | cut -c1-200 | tr '\n' '|')"
fi
