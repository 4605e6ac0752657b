#!/usr/bin/env bash
# Seed 97 failures, each case alone: fused vs GPU oracle (twice), vs CPU oracle, and both oracles.
set -uo pipefail
W=$OUT/w; mkdir -p "$W"; t0=$SECONDS
log() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$W/stages.log"; }
trap 'cd $OUT && tar czf r.tgz w && rm -rf w' EXIT
B=build-dev
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF >"$W/cmake.log" 2>&1 &&
  cmake --build $B -j18 --target dsa-parity >"$W/build.log" 2>&1 || { log "build FAILED"; tail -30 "$W/build.log"; exit 1; }
log build
for n in ${CASES:-1741 2769}; do
  f=scratch/c97/case-$n.json
  for o in ${ORACLES:-gpu cpu}; do
    $B/dsa-parity repro $f --backend cuda --oracle $o >"$W/case$n-$o.txt" 2>&1
    echo "rc $?" >>"$W/case$n-$o.txt"
    log "case $n oracle $o: $(grep -E '^(pass|fail) ' "$W/case$n-$o.txt" | cut -c1-6) $(grep -E ' (dW_UV|O|dw) ' "$W/case$n-$o.txt" | head -3 | tr -s ' ' | cut -c1-90 | tr '\n' '|')"
  done
  grep -iE "disagree|agree" "$W/case$n-both.txt" | head -3
done
