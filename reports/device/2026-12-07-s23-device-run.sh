#!/usr/bin/env bash
# Session 23 device runs: SHA=<label> SEED=<seed> bash scratch/s23-run.sh STAGE...
# Before the first call: git apply scratch/s20-pending.patch here (or carry it and run the topkpatch stage); carry scratch/s21-run.sh.
# The smallest useful call (~330 s): buildmin fusedtests repeat (RBUDGET=70); a full one (~500 s): buildmin fusedtests repeat production.
# Call 1: buildlean basebuild indexertests losstests oracletests repeat basewait indexerab; call 2 (warm): gpu production.
# With time to spare: lossprobe (carry scratch/s21-loss-probe.patch too): how much of the GLM-5 loss the dk_I atomics are.
set -uo pipefail
W=$OUT/w; mkdir -p "$W"
[ -n "${SHA:-}" ] && export DSA_GIT_SHA=$SHA  # the device checkout's git HEAD is the last landed commit, not this tree
B=build-dev
P="$(date +%F)-s23-${SHA:-nosha}"
SEED=${SEED:-106}
t0=$SECONDS
log() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$W/stages.log"; }
trap 'cd $OUT && tar czf r.tgz w && rm -rf w' EXIT
D=$B/dsa-parity
BASE=/tmp/base  # the last landed commit (the device checkout's HEAD), for A/B benchmarks
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >"$W/$P-nvidia-smi.csv" 2>&1
lt() { $B/fused/fused_tests --gtest_filter='FusedIndexerLoss*:*AttentionKernels*:AttentionBackward*:Run*:*WgmmaForward*' >"$W/$P-$1.log" 2>&1 &&
       $B/harness/harness_tests --gtest_filter='CudaCases*:CudaBackend*:RunCase*' >>"$W/$P-$1.log" 2>&1; }
for st in "$@"; do
  case $st in
    buildlean)
      cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF -DCMAKE_CUDA_ARCHITECTURES=90a-real >"$W/cmake.log" 2>&1 &&
        cmake --build $B -j16 --target dsa-parity fused_tests harness_tests check_tests gpu_oracle_tests >"$W/build.log" 2>&1 ||
        { log "build FAILED"; tail -40 "$W/build.log"; exit 1; }
      log "build (lean)" ;;
    buildfwd)  # the CLI, the fused kernels' tests and the GPU oracle's tests
      cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF -DCMAKE_CUDA_ARCHITECTURES=90a-real >"$W/cmake.log" 2>&1 &&
        cmake --build $B -j16 --target dsa-parity fused_tests gpu_oracle_tests >"$W/build.log" 2>&1 ||
        { log "build FAILED"; tail -40 "$W/build.log"; exit 1; }
      log "build (fwd)" ;;
    buildmin)  # what the short call needs: the CLI and the fused kernels' tests
      cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF -DCMAKE_CUDA_ARCHITECTURES=90a-real >"$W/cmake.log" 2>&1 &&
        cmake --build $B -j16 --target dsa-parity fused_tests >"$W/build.log" 2>&1 ||
        { log "build FAILED"; tail -40 "$W/build.log"; exit 1; }
      log "build (min)" ;;
    fusedtests)  # the indexer's and the loss's tests, and the attention kernels' (unchanged)
      $B/fused/fused_tests --gtest_filter='FusedIndexer*:FusedIndexerLoss*:*AttentionKernels*:*WgmmaForward*:AttentionBackward*:Run*' >"$W/$P-fused-tests.log" 2>&1
      log "fused tests rc $?"; grep -E "^\[  (PASSED|FAILED)|Failure|changed run to run|canonical" "$W/$P-fused-tests.log" | head -12 ;;
    basebuild)  # in the background; basewait joins it
      rm -rf $BASE; git worktree add -f $BASE ${BASE_SHA:-HEAD} >"$W/base-wt.log" 2>&1 || { log "worktree FAILED"; cat "$W/base-wt.log"; }
      ( cmake -S $BASE -B $BASE/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF -DCMAKE_CUDA_ARCHITECTURES=90a-real >"$W/base-cmake.log" 2>&1 &&
        cmake --build $BASE/b -j${BASE_J:-8} --target dsa-parity >"$W/base-build.log" 2>&1; echo $? >"$W/base-rc" ) &
      log "base build started ($(git -C $BASE log --oneline -1 | cut -c1-60))" ;;
    basewait)
      n=0; while [ ! -f "$W/base-rc" ] && [ $n -lt ${BASE_WAIT:-60} ]; do sleep 2; n=$((n + 2)); done
      log "base build rc $(cat $W/base-rc 2>/dev/null || echo 'not done: no A/B')" ;;
    losstests)
      if lt loss-tests; then log "loss tests passed"; else log "loss tests FAILED:"; grep -E "FAILED|Failure|error" "$W/$P-loss-tests.log" | head -16; fi
      grep -hE "^\[  (PASSED|FAILED|SKIPPED)" "$W/$P-loss-tests.log" | head -8 ;;
    lossab)  # the loss split, this tree and the base interleaved, twice each
      F="BM_Fused(AttentionForward|AttentionBackward|AttentionBackwardWithTarget|LossForwardBackward|LossGivenTarget)/model:[01]/S:${BENCH_S:-(4096|16384)}/"
      for r in 1 2; do
        $D bench --benchmark_filter="$F" --benchmark_out="$W/$P-bench-loss-split-$r.json" >"$W/bench-loss-$r.txt" 2>&1
        log "loss split (this tree) $r rc $?"; grep -E "^BM_Fused(Loss|AttentionBackwardWith)" "$W/bench-loss-$r.txt" | cut -c1-150
        [ -x $BASE/b/dsa-parity ] || continue
        F2="BM_Fused(AttentionBackwardWithTarget|LossGivenTarget)/model:[01]/S:${BENCH_S:-(4096|16384)}/"
        $BASE/b/dsa-parity bench --benchmark_filter="$F2" --benchmark_out="$W/$P-bench-loss-base-${BASE_SHA:-head}-$r.json" >"$W/bench-base-$r.txt" 2>&1
        log "loss (base ${BASE_SHA:-head}) $r rc $?"; grep -E "^BM_Fused(Loss|AttentionBackwardWith)" "$W/bench-base-$r.txt" | cut -c1-150
      done ;;
    indexerab)  # the indexer + top-k, this tree and the base interleaved, twice each
      F="BM_FusedIndexerTopk/model:[01]/S:${BENCH_S:-(4096|16384)}/"
      for r in 1 2; do
        $D bench --benchmark_filter="$F" --benchmark_out="$W/$P-bench-indexer-$r.json" >"$W/bench-indexer-$r.txt" 2>&1
        log "indexer (this tree) $r rc $?"; grep -E "^BM_Fused" "$W/bench-indexer-$r.txt" | cut -c1-150
        [ -x $BASE/b/dsa-parity ] || continue
        $BASE/b/dsa-parity bench --benchmark_filter="$F" --benchmark_out="$W/$P-bench-indexer-base-${BASE_SHA:-head}-$r.json" >"$W/bench-ibase-$r.txt" 2>&1
        log "indexer (base) $r rc $?"; grep -E "^BM_Fused" "$W/bench-ibase-$r.txt" | cut -c1-150
      done ;;
    lossprobe)  # an upper bound: the loss given T^ without its dk_I products and atomics (scratch/s21-loss-probe.patch, carry it), against this tree
      PB=/tmp/probe; rm -rf $PB; git worktree add -f $PB HEAD >"$W/probe-wt.log" 2>&1 &&
        { ! git apply --check -R scratch/s20-pending.patch 2>/dev/null || git -C $PB apply "$PWD/scratch/s20-pending.patch"; } &&
        git -C $PB apply "$PWD/scratch/s21-loss-probe.patch" &&
        cmake -S $PB -B $PB/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF -DCMAKE_CUDA_ARCHITECTURES=90a-real \
          -DCMAKE_CUDA_FLAGS=-DDSA_PROBE_NO_DK_I=1 >"$W/probe-cmake.log" 2>&1 &&
        cmake --build $PB/b -j16 --target dsa-parity >"$W/probe-build.log" 2>&1 || { log "probe build FAILED"; tail -20 "$W/probe-build.log"; continue; }
      F="BM_FusedLossGivenTarget/model:[01]/S:(4096|16384)/"
      for r in 1 2; do
        $D bench --benchmark_filter="$F" --benchmark_out="$W/$P-bench-loss-given-$r.json" >"$W/bench-lg-$r.txt" 2>&1
        log "loss given T^ (this tree) $r"; grep -E "^BM_Fused" "$W/bench-lg-$r.txt" | cut -c1-150
        $PB/b/dsa-parity bench --benchmark_filter="$F" --benchmark_out="$W/$P-bench-loss-given-no-dkI-probe-$r.json" >"$W/bench-probe-$r.txt" 2>&1
        log "loss given T^ without dk_I (probe) $r"; grep -E "^BM_Fused" "$W/bench-probe-$r.txt" | cut -c1-150
      done ;;
    topkpatch)  # the canonical-order top-k + the loss tidy-up (scratch/s20-pending.patch; carry it), if not committed yet
      git apply --check scratch/s20-pending.patch 2>/dev/null && git apply scratch/s20-pending.patch && log "topk patch applied" ;;
    oracletests)  # the GPU oracle's own tests (check/gpu/gpu_oracle_tests: DeltaSlackMatchesCpuReference and the rest)
      $B/check/gpu/gpu_oracle_tests >"$W/$P-oracle-tests.log" 2>&1
      log "oracle tests rc $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|Failure|DeltaSlack" "$W/$P-oracle-tests.log" | head -8 ;;
    indexertests)
      $B/fused/fused_tests --gtest_filter='FusedIndexer*:*AttentionKernels*:*WgmmaForward*:AttentionBackward*:Run*' >"$W/$P-indexer-tests.log" 2>&1
      log "indexer tests rc $?"; grep -E "^\[  (PASSED|FAILED)|Failure|changed run to run|canonical" "$W/$P-indexer-tests.log" | head -12 ;;
    repeat)
      $D fuzz --backend cuda --oracle gpu --profile nightly --seed ${RSEED:-108} --repeat 3 --time-budget ${RBUDGET:-120} --progress-every 60 \
        --report "$W/$P-fuzz-nightly-gpu-seed${RSEED:-108}-repeat3.json" >"$W/$P-fuzz-nightly-gpu-seed${RSEED:-108}-repeat3.log" 2>&1
      log "repeat rc $?"; grep -E "^[0-9]+ cases:|^coverage|^case time" "$W/$P-fuzz-nightly-gpu-seed${RSEED:-108}-repeat3.log" | head -6 ;;
    gpu)
      $D fuzz --backend cuda --oracle gpu --profile nightly --seed $SEED --time-budget ${BUDGET:-240} --progress-every 60 \
        --report "$W/$P-fuzz-nightly-gpu-seed$SEED.json" >"$W/$P-fuzz-nightly-gpu-seed$SEED.log" 2>&1
      log "nightly gpu rc $?"; grep -E "^[0-9]+ cases:|^coverage|^case time|FAIL" "$W/$P-fuzz-nightly-gpu-seed$SEED.log" | head -12 ;;
    production)
      $D fuzz --backend cuda --oracle gpu --profile production --seed $SEED --time-budget ${PROD_BUDGET:-300} --progress-every 60 \
        --report "$W/$P-fuzz-production-seed$SEED.json" >"$W/$P-fuzz-production-seed$SEED.log" 2>&1
      log "production rc $?"; grep -E "^[0-9]+ cases:|^coverage|^case time|FAIL" "$W/$P-fuzz-production-seed$SEED.log" | head -12 ;;
    repro)  # CASE (carried): this tree and the base, REPS (3) times each
      for r in $(seq ${REPS:-3}); do
        $D repro "$CASE" --backend cuda --oracle both --report "$W/$P-repro-$(basename $CASE .json)-$r.json" >"$W/$P-repro-$r.log" 2>&1
        log "repro (this tree) $r rc $?"; grep -E "dk_pe|passed|failed" "$W/$P-repro-$r.log" | head -3
        [ -x $BASE/b/dsa-parity ] || continue
        $BASE/b/dsa-parity repro "$CASE" --backend cuda --oracle both --report "$W/$P-repro-base-$(basename $CASE .json)-$r.json" >"$W/$P-repro-base-$r.log" 2>&1
        log "repro (base) $r rc $?"; grep -E "dk_pe|passed|failed" "$W/$P-repro-base-$r.log" | head -3
      done ;;
    bwdtests)  # EXPERIMENT: the wgmma backward's tests; if they fail, the later stages run the mma.sync backward
      $B/fused/fused_tests --gtest_filter='*WgmmaBackward*:*AttentionKernels*:AttentionBackward*:*WgmmaForward*:Run*' >"$W/$P-bwd-tests.log" 2>&1
      rc=$?; log "bwd tests rc $rc"; grep -E "^\[  (PASSED|FAILED)|Failure|^\[  FAILED|spread" "$W/$P-bwd-tests.log" | head -30
      grep -B2 -A12 'Failure' "$W/$P-bwd-tests.log" | head -80
      [ $rc -ne 0 ] && export DSA_BWD_KERNEL=mma && log "later stages: mma.sync backward" ;;
    bwdbench)  # EXPERIMENT: the backward, wgmma (best) and mma.sync interleaved, twice
      for r in 1 2; do for k in wgmma mma; do
        DSA_BWD_KERNEL=$([ $k = mma ] && echo mma || echo best) $D bench --benchmark_filter="BM_FusedAttentionBackward(HotKeys)?/model:[01]/S:(4096|16384)/" \
          --benchmark_out="$W/$P-bench-bwd-$k-$r.json" >"$W/bench-bwd-$k-$r.txt" 2>&1
        log "bwd $k run $r rc $?: $(grep -E '^BM_FusedAttentionBackward' $W/bench-bwd-$k-$r.txt | awk '{printf "%s ", $2}')"
      done; done
      grep -E '^BM_' $W/bench-bwd-wgmma-1.txt | head -10 ;;
    ncubwd)
      timeout 120 ncu --clock-control none --kernel-name regex:attention_backward_sm90 --launch-skip 1 --launch-count 1 \
          --section SpeedOfLight --section WarpStateStats --section SchedulerStats --page raw \
          $D bench --benchmark_filter='BM_FusedAttentionBackward/model:0/S:4096/' >"$W/$P-ncu-bwd-raw.txt" 2>&1
      log "ncu bwd rc $?"; grep -E "warps_issue_stalled_.*_per_issue_active|pipe_tensor.*pct" "$W/$P-ncu-bwd-raw.txt" | sort -k3 -g -r | head -14 ;;
    fwdvar)  # EXPERIMENT: the forward's variants (DSA_FWD_VARIANT bits, fused/attention_fwd_sm90.cu), tests then bench interleaved
      VS=${VARIANTS:-0 8 32 40 64 72}
      for v in $VS; do
        DSA_FWD_VARIANT=$v $B/fused/fused_tests --gtest_filter='*WgmmaForward*:*AttentionKernels*' >"$W/fwdvar-$v-tests.log" 2>&1
        log "variant $v tests rc $? $(grep -cE '^\[       OK' $W/fwdvar-$v-tests.log) ok"
      done
      for r in 1 2; do for v in $VS; do
        DSA_FWD_VARIANT=$v $D bench --benchmark_filter="BM_FusedAttentionForward/model:[01]/S:${BENCH_S:-(4096|16384)}/" \
          --benchmark_out="$W/$P-bench-fwd-v$v-$r.json" >"$W/bench-fwd-v$v-$r.txt" 2>&1
        log "fwd v$v run $r rc $?: $(grep -E '^BM_FusedAttentionForward/' $W/bench-fwd-v$v-$r.txt | awk '{printf "%s ", $2}')"
      done; done ;;
    ncu)  # stall reasons of the forward, variants NCUV (default 0), DSV3.2 S = 4096 (raw WarpStateStats metrics)
      for v in ${NCUV:-0}; do
        DSA_FWD_VARIANT=$v timeout 150 ncu --clock-control none --kernel-name regex:attention_forward_sm90 --launch-skip 1 --launch-count 1 \
          --section SpeedOfLight --section WarpStateStats --section SchedulerStats --page raw \
          $D bench --benchmark_filter='BM_FusedAttentionForward/model:0/S:4096/' >"$W/$P-ncu-fwd-raw-v$v.txt" 2>&1
        log "ncu v$v rc $?"; grep -E "warps_issue_stalled_.*_per_issue_active|pipe_tensor.*pct" "$W/$P-ncu-fwd-raw-v$v.txt" | sort -k3 -g -r | head -14
      done ;;
    *) log "unknown stage $st"; exit 2 ;;
  esac
done
