#!/usr/bin/env bash
# Session 18 device runs. SHA=<label> SEED=<seed> bash scratch/s18-run.sh STAGE...
# What ran (H100, tree "s18a" = the loss kernel commit, comments aside):
#   SHA=s18a SEED=106 BUDGET=180 ... buildlean basebuild losstests gpu basewait lossab
#   SHA=s18a SEED=106 PROD_BUDGET=270 ... production
#   then by hand: dsa-parity fuzz --backend cuda --oracle gpu --profile nightly --seed 107 --repeat 3
#     --time-budget 100 (-> *-fuzz-nightly-gpu-seed107-repeat3.*: the top-k finding)
# Six earlier tries got no machine (or one that stopped answering) and used 1200 s of the 1800.
set -uo pipefail
W=$OUT/w; mkdir -p "$W"
[ -n "${SHA:-}" ] && export DSA_GIT_SHA=$SHA  # the device checkout's git HEAD is the last landed commit, not this tree
B=build-dev
P="2026-12-06-s18-${SHA:-nosha}"
SEED=${SEED:-106}
t0=$SECONDS
log() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$W/stages.log"; }
trap 'cd $OUT && tar czf r.tgz w && rm -rf w' EXIT
D=$B/dsa-parity
BASE=/tmp/base  # the last landed commit (the device checkout's HEAD), for A/B benchmarks
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$W/$P-nvidia-smi.csv" 2>&1
lt() { $B/fused/fused_tests --gtest_filter='FusedIndexerLoss*:AttentionKernels*:AttentionBackward*:Run*:WgmmaForward*' >"$W/$P-$1.log" 2>&1 &&
       $B/harness/harness_tests --gtest_filter='CudaCases*:CudaBackend*:RunCase*' >>"$W/$P-$1.log" 2>&1; }
for st in "$@"; do
  case $st in
    buildlean)
      cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF -DCMAKE_CUDA_ARCHITECTURES=90a-real >"$W/cmake.log" 2>&1 &&
        cmake --build $B -j16 --target dsa-parity fused_tests harness_tests >"$W/build.log" 2>&1 ||
        { log "build FAILED"; tail -40 "$W/build.log"; exit 1; }
      log "build (lean)" ;;
    basebuild)  # in the background; basewait joins it
      rm -rf $BASE; git worktree add -f $BASE c3b6ba4 >"$W/base-wt.log" 2>&1 || { log "worktree FAILED"; cat "$W/base-wt.log"; }
      ( cmake -S $BASE -B $BASE/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF -DCMAKE_CUDA_ARCHITECTURES=90a-real >"$W/base-cmake.log" 2>&1 &&
        cmake --build $BASE/b -j${BASE_J:-8} --target dsa-parity >"$W/base-build.log" 2>&1; echo $? >"$W/base-rc" ) &
      log "base build started ($(git -C $BASE log --oneline -1 | cut -c1-60))" ;;
    basewait)
      n=0; while [ ! -f "$W/base-rc" ] && [ $n -lt ${BASE_WAIT:-60} ]; do sleep 2; n=$((n + 2)); done
      log "base build rc $(cat $W/base-rc 2>/dev/null || echo 'not done: no A/B')" ;;
    losstests)
      # If the loss kernel change fails its tests, restore the last landed loss kernel, rebuild and
      # test that; the later stages then run on it (variant file says which).
      if lt loss-tests; then log "loss tests passed"; echo new >"$W/variant"
      else
        log "loss tests FAILED:"; grep -E "FAILED|Failure|error" "$W/$P-loss-tests.log" | head -16
        git checkout -- fused/loss_kl.cu fused/mma.cuh fused/loss_test.cpp && cmake --build $B -j16 --target dsa-parity fused_tests harness_tests >"$W/build2.log" 2>&1
        P="2026-12-06-s18-c3b6ba4"; export DSA_GIT_SHA=c3b6ba4
        lt loss-tests-reverted && { log "reverted: tests pass"; echo reverted >"$W/variant"; } || { log "reverted: tests still fail"; exit 1; }
      fi
      grep -hE "^\[  (PASSED|FAILED|SKIPPED)" "$W/$P-loss-tests"*.log | head -8 ;;
    lossab)  # the loss split, this tree and the base interleaved, twice each
      F="BM_Fused(AttentionForward|AttentionBackward|AttentionBackwardWithTarget|LossForwardBackward|LossGivenTarget)/model:[01]/S:${BENCH_S:-(4096|16384)}/"
      for r in 1 2; do
        $D bench --benchmark_filter="$F" --benchmark_out="$W/$P-bench-loss-split-$r.json" >"$W/bench-loss-$r.txt" 2>&1
        log "loss split (this tree) $r rc $?"; grep -E "^BM_Fused(Loss|AttentionBackwardWith)" "$W/bench-loss-$r.txt" | cut -c1-150
        [ -x $BASE/b/dsa-parity ] || continue
        F2="BM_Fused(AttentionBackwardWithTarget|LossGivenTarget)/model:[01]/S:${BENCH_S:-(4096|16384)}/"
        $BASE/b/dsa-parity bench --benchmark_filter="$F2" --benchmark_out="$W/$P-bench-loss-base-c3b6ba4-$r.json" >"$W/bench-base-$r.txt" 2>&1
        log "loss (base c3b6ba4) $r rc $?"; grep -E "^BM_Fused(Loss|AttentionBackwardWith)" "$W/bench-base-$r.txt" | cut -c1-150
      done ;;
    gpu)
      $D fuzz --backend cuda --oracle gpu --profile nightly --seed $SEED --time-budget ${BUDGET:-240} --progress-every 60 \
        --report "$W/$P-fuzz-nightly-gpu-seed$SEED.json" >"$W/$P-fuzz-nightly-gpu-seed$SEED.log" 2>&1
      log "nightly gpu rc $?"; grep -E "^[0-9]+ cases:|^coverage|^case time|FAIL" "$W/$P-fuzz-nightly-gpu-seed$SEED.log" | head -12 ;;
    production)
      $D fuzz --backend cuda --oracle gpu --profile production --seed $SEED --time-budget ${PROD_BUDGET:-300} --progress-every 60 \
        --report "$W/$P-fuzz-production-seed$SEED.json" >"$W/$P-fuzz-production-seed$SEED.log" 2>&1
      log "production rc $?"; grep -E "^[0-9]+ cases:|^coverage|^case time|FAIL" "$W/$P-fuzz-production-seed$SEED.log" | head -12 ;;
    *) log "unknown stage $st"; exit 2 ;;
  esac
done
