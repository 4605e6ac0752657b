#!/bin/bash
# One device call: build, then the stages named in STAGES, each writing into a work folder packed
# into $OUT/results.tgz (see "Results" below), the script's output in $OUT/log.
# Usage on the device machine, from a checkout:
#   OUT=<folder> STAGES="tests bench fuzz production replay" NIGHTLY_S=280 SEED=11 ORACLE=cpu reports/device/device-run.sh
# Stages: tests (fused_tests, the GPU oracle's tests, the cuda harness tests and the cuda CLI tests),
# oraclebench (the GPU oracle at DeepSeek-V3.2 and GLM-5 shape), fwdbench (attention forward only, S = 4096),
# bench (every fused benchmark), fuzz (nightly for NIGHTLY_S seconds with --oracle $ORACLE),
# fuzzcpu / fuzzgpu (the same nightly with --oracle cpu / gpu; NIGHTLY_SEEDS="a b": one run per seed,
# fuzz-nightly-<oracle>-seed<s>.*; a run whose report stops growing gets a stall dump, stall_dump below;
# CASE_TIMEOUT_S: --case-timeout for each case, so that a hung backend fails as a timeout),
# production (PROD_S seconds),
# replay (the corpus cases/), both (the nightly for BOTH_S seconds with --oracle both: the agreement table),
# cases (replay of the case files under CASES, e.g. a carried scratch folder), stallhunt (the seed-115
# stall's cases replayed HUNT_ROUNDS times with stall dumps, then under compute-sanitizer), mutant (the kernel mutants
# named in MUTANTS through tools/kernel_mutants.sh), torch (the Python package's tests with torch, then the
# PyTorch example on the device through exec2). A build already in build/ is reused (the machine keeps it
# while warm; TARGETS overrides the targets built). repeat: the nightly with --repeat $REPEAT for REPEAT_S seconds (determinism checked).
# caseallin: BM_CaseAllIn (a production-shape case all in, the timing split), also with plain memory
# (DSA_TENSOR_MEMORY=plain) unless CASEALLIN_PLAIN=0.
# benchlong: the fused benchmarks at S 64K/128K and the hot-keys backward (BENCH_FILTER overrides).
# megatron knobs: MEGATRON_TESTS picks unittest names (default the whole file), MEGATRON_PROFILES the
# slices (default "nightly production"), MEGATRON_PROD_CP the production slice's --cp (1 on a one-GPU
# machine: its cp > 1 cases would run as CPU ranks, which take Tp <= 1024 only).
# megatron: Megatron-LM's own DSA through python/dsa_parity/adapters/megatron.py, from the checkout carried
# in .megatron/ (tools/megatron_fetch.sh): its unittest file, then for each of MEGATRON_RUNS
# (kernels:dtype[:entry], entry functions or dsattention; default "unfused:float32 unfused:bfloat16 streaming:bfloat16 tilelang:bfloat16") a nightly slice of
# MEGATRON_S (50) seconds, the edge corpus first, and a production slice of MEGATRON_PROD_S (40) seconds
# whose Tp is capped at MEGATRON_PROD_TOKENS (4096: H·Tp² ≤ 2^31, the unfused paths' [H, Tp, Tp]
# tensors fit; fuzz draws within the worker's max_tokens); failures are shrunk unless MEGATRON_SHRINK=0
# (nightly: into $OUT/megatron-shrunk-<kernels>-<dtype>/, production: next to its report). Four runs can pass one 600 s call: give two calls two MEGATRON_RUNS each. Both profiles draw
# cp > 1 cases; zigzag ones run through Megatron's own CP (adapters/megatron_cp.py: a process per CP
# rank, DSAttention.forward each, unfused kernels), with the ranks on the host CPU over gloo
# (MEGATRON_CP_DEVICE=cpu, the default here; cuda: NCCL with a GPU per rank, else the ranks share the
# GPU over gloo, not yet run), CPU-sized (Tp <= 1024, H*Tp^2 <= 2^26, larger: cannot-run) and each
# case's ranks bounded by MEGATRON_CP_TIMEOUT (60) seconds.
# Kernel work (one maintained set of stages, so no session forks this script):
# CUDA_ARCHS (e.g. 90a-real) sets CMAKE_CUDA_ARCHITECTURES for the build and the mutants' builds.
# PATCH: an experiment patch (e.g. reports/device/*-experiment.patch) applied to the tree before the
# build (git apply, else patch -p1); the call stops if it does not apply.
# fusedtests: fused_tests with FUSED_FILTER (default all; 300 s cap). oracletests: check/gpu/gpu_oracle_tests.
# variants: for each of VARIANTS (e.g. "0 1 2") with VARIANT_ENV=<v> set (a switch an uncommitted
# experiment tree reads), fused_tests with VARIANT_TESTS, then the benchmarks VARIANT_BENCH, all
# variants interleaved, twice (bench-var-<v>-<run>.json). lossplit: the attention forward, backward,
# backward with T^ and the loss given T^ at both models, S 4K/16K, twice (bench-loss-split-<run>.json;
# loss share = (WithTarget − Backward + LossGivenTarget) / (Forward + Backward), printed by
# reports/device/loss_share.py into loss-share.txt).
# ncu: Nsight Compute's SpeedOfLight, WarpStateStats, SchedulerStats and MemoryWorkloadAnalysis (raw
# page) for each of NCU_RUNS ("name|kernel regex|benchmark filter" ...), its second launch (ncu-<name>-raw.txt). mutantsinplace: the kernel mutants
# MUTANTS (tools/kernel_mutants.sh, MUTANT_FILTER the tests each runs) rebuilt one after the other in
# build/ itself (only what the define touches), which is then reconfigured without one; run it last
# (the next build stage also resets it).
# mpicuda: --backend cuda --comm mpi (one process per rank, NCCL bootstrapped over MPI): the nightly
# on one rank for MPI_S seconds, the very cases it ran replayed with --comm local and their verdicts
# compared (reports/device/compare_verdicts.py), -np GPUs+1 refused (exit 2, no hang), -np 2/4/8 up to
# the GPU count (MPI_S seconds each), then the MpiCuda* tests of mpi_cli_tests.
# Results: the device tool returns only so many files from $OUT, and nothing of a call it had to
# kill, so the stages write into a work folder that is packed into $OUT/results.tgz after the build
# and after every stage (the last complete stage survives a kill), with this script's own output in
# $OUT/log. DEADLINE_S (default 540; the call limit is 600): a stage that would start later is
# skipped and said so, and a stage still running at the deadline is cut (timeout), so the script
# ends, and packs, before the call limit.
set -o pipefail
export NCCL_NVLS_ENABLE=0
FINAL_OUT=$OUT
OUT=$(mktemp -d)
DEADLINE_S=${DEADLINE_S:-540}
exec > >(tee "$FINAL_OUT/log") 2>&1
pack() { cp "$FINAL_OUT/log" "$OUT/log" 2>/dev/null; tar czf "$FINAL_OUT/results.tgz.part" -C "$OUT" . && mv "$FINAL_OUT/results.tgz.part" "$FINAL_OUT/results.tgz"; }
trap pack EXIT
NIGHTLY_S=${NIGHTLY_S:-280}
PROD_S=${PROD_S:-60}
SEED=${SEED:-11}
ORACLE=${ORACLE:-cpu}
BOTH_S=${BOTH_S:-120}
if [ -n "$PATCH" ]; then
  { git apply "$PATCH" 2>/dev/null || patch -p1 --forward < "$PATCH" > /dev/null; } && echo "applied $PATCH" ||
    { echo "PATCH $PATCH does not apply"; exit 1; }
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDSA_MUTANT= ${CUDA_ARCHS:+-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS} > $OUT/build.log 2>&1 &&
  cmake --build build -j16 --target ${TARGETS:-core_tests fused_tests gpu_oracle_tests gpu_oracle_bench harness_tests tool_tests dsa-parity} >> $OUT/build.log 2>&1 ||
  { grep -E "error|undefined" $OUT/build.log | head -40; exit 1; }
echo "built $(date -u +%T) ($SECONDS s)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/nvidia-smi.csv 2>&1
pack
# stall_dump PID REPORT PREFIX: when PID's streamed report (REPORT.partial-*) has not grown for
# STALL_DUMP_S (40) seconds, what each of its threads is doing (gdb's backtraces where gdb is
# installed, else the kernel's wchan and stack of each task) and the GPU's load, into PREFIX-*.txt,
# once: the session's own stall watch then ends it, but only says which phase each thread was in.
stall_dump() {
  local pid=$1 rep=$2 prefix=$3 last=-1 still=0
  while kill -0 $pid 2>/dev/null; do
    sleep 5
    local size=$(cat $rep.partial-* 2>/dev/null | wc -c)
    if [ "$size" = "$last" ]; then still=$((still + 5)); else still=0; last=$size; fi
    [ $still -lt ${STALL_DUMP_S:-40} ] && continue
    nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw --format=csv > $prefix-gpu.txt 2>&1
    if command -v gdb > /dev/null; then
      timeout 60 gdb -p $pid -batch -ex "thread apply all bt" > $prefix-stacks.txt 2>&1
    fi
    for t in /proc/$pid/task/*; do
      echo "== $t $(cat $t/comm 2>/dev/null) wchan=$(cat $t/wchan 2>/dev/null) syscall=$(cut -d' ' -f1 $t/syscall 2>/dev/null)"
      cat $t/stack 2>/dev/null
    done > $prefix-tasks.txt 2>&1
    sleep 5
    nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw --format=csv >> $prefix-gpu.txt 2>&1
    echo "stall dump: $prefix-*.txt (report still for $still s)"
    return
  done
}
# run_watched REPORT LOG CMD...: CMD (writing its streamed report to REPORT) with its output in LOG,
# under stall_dump (dumps as REPORT without .json, then -stall-*.txt); returns CMD's exit code.
run_watched() {
  local rep=$1 log=$2; shift 2
  "$@" > "$log" 2>&1 &
  local pid=$!
  stall_dump $pid "$rep" "${rep%.json}-stall" &
  local dumper=$! rc
  wait $pid; rc=$?
  kill $dumper 2>/dev/null; wait $dumper 2>/dev/null
  return $rc
}
run_stage() {
  case $1 in
    tests)
      ./build/core/core_tests 2>&1 | tee $OUT/core-tests.log | grep -E "PASSED|FAILED"
      timeout 180 ./build/fused/fused_tests 2>&1 | tee $OUT/fused-tests.log | grep -E "PASSED|FAILED|Failure|SKIPPED|spread|Expected|Which|got" | head -40
      timeout 120 ./build/check/gpu/gpu_oracle_tests 2>&1 | tee $OUT/gpu-oracle-tests.log | grep -E "PASSED|FAILED|Failure" | head -20
      timeout 120 ./build/harness/harness_tests --gtest_filter='Cuda*' 2>&1 | tee $OUT/harness-cuda-tests.log | grep -E "PASSED|FAILED|Failure"
      timeout 120 ./build/tools/tool_tests --gtest_filter='Cli.Cuda*' 2>&1 | tee $OUT/cli-cuda-tests.log | grep -E "PASSED|FAILED|Failure|SKIPPED" ;;
    fusedtests)
      timeout 300 ./build/fused/fused_tests ${FUSED_FILTER:+--gtest_filter=$FUSED_FILTER} > $OUT/fused-tests.log 2>&1; echo "exit $?"
      grep -E "^\[  (PASSED|FAILED|SKIPPED)|Failure|spread" $OUT/fused-tests.log | head -30 ;;
    oracletests)
      timeout 120 ./build/check/gpu/gpu_oracle_tests > $OUT/gpu-oracle-tests.log 2>&1; echo "exit $?"
      grep -E "^\[  (PASSED|FAILED|SKIPPED)|Failure" $OUT/gpu-oracle-tests.log | head -20 ;;
    variants)
      for v in $VARIANTS; do
        env $VARIANT_ENV=$v timeout 120 ./build/fused/fused_tests --gtest_filter="$VARIANT_TESTS" > $OUT/var-$v-tests.log 2>&1
        echo "variant $v tests exit $?: $(grep -cE '^\[       OK' $OUT/var-$v-tests.log) ok"; grep -E "^\[  FAILED" $OUT/var-$v-tests.log | head -5
      done
      for r in 1 2; do for v in $VARIANTS; do
        env $VARIANT_ENV=$v ./build/dsa-parity bench --benchmark_filter="$VARIANT_BENCH" --benchmark_out=$OUT/bench-var-$v-$r.json \
          --benchmark_out_format=json > $OUT/bench-var-$v-$r.txt 2>&1
        echo "variant $v run $r exit $?: $(grep -E '^BM_' $OUT/bench-var-$v-$r.txt | awk '{printf "%s ", $2}')"
      done; done ;;
    lossplit)
      for r in 1 2; do
        ./build/dsa-parity bench --benchmark_filter="BM_Fused(AttentionForward|AttentionBackward|AttentionBackwardWithTarget|LossGivenTarget)/model:[01]/S:(4096|16384)/" \
          --benchmark_out=$OUT/bench-loss-split-$r.json --benchmark_out_format=json > $OUT/bench-loss-split-$r.txt 2>&1
        echo "loss split $r exit $?"; grep -E "^BM_" $OUT/bench-loss-split-$r.txt | awk '{print $1, $2}'
      done
      python3 reports/device/loss_share.py $OUT/bench-loss-split-*.json | tee $OUT/loss-share.txt ;;
    ncu)
      for run in $NCU_RUNS; do
        IFS='|' read name kernel bench <<< "$run"
        timeout 150 ncu --clock-control none --kernel-name regex:$kernel --launch-skip 1 --launch-count 1 \
          --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --page raw \
          ./build/dsa-parity bench --benchmark_filter="$bench" > $OUT/ncu-$name-raw.txt 2>&1; echo "ncu $name exit $?"
        grep -E "warps_issue_stalled_.*_per_issue_active|pipe_tensor.*pct|lts__t_sectors_op_red.sum |lts__t_sectors_op_atom.sum |gpu__time_duration.sum|l1tex__throughput.avg.pct|lts__throughput.avg.pct|dram__throughput.avg.pct" \
          $OUT/ncu-$name-raw.txt | sort -k3 -g -r | head -16
      done ;;
    mutantsinplace)
      BUILD_DIR=build J=16 FILTER=$MUTANT_FILTER tools/kernel_mutants.sh $MUTANTS > $OUT/kernel-mutants.log 2>&1
      echo "exit $?"; cat $OUT/kernel-mutants.log; cp build/mutant-*.log $OUT/ 2>/dev/null ;;
    fwdbench)
      ./build/dsa-parity bench --benchmark_filter='AttentionForward.*S:4096' 2>&1 | grep -E "BM_|rror" ;;
    caseallin)
      # One production-shape case all in (generate, cuda, GPU oracle, compare), the timing split as
      # counters; again with DSA_TENSOR_MEMORY=plain (no huge pages, no kept blocks) beside it.
      ./build/dsa-parity bench --benchmark_filter=BM_CaseAllIn --benchmark_out=$OUT/bench-case-all-in.json \
        --benchmark_out_format=json 2>&1 | grep -E "BM_|rror"
      [ "${CASEALLIN_PLAIN:-1}" = 1 ] && DSA_TENSOR_MEMORY=plain ./build/dsa-parity bench --benchmark_filter=BM_CaseAllIn \
        --benchmark_out=$OUT/bench-case-all-in-plain-memory.json --benchmark_out_format=json 2>&1 | grep -E "BM_|rror" ;;
    benchlong)
      ./build/dsa-parity bench --benchmark_filter="${BENCH_FILTER:-BM_Fused.*(S:65536|S:131072|HotKeys)}" \
        --benchmark_out=$OUT/bench-long.json --benchmark_out_format=json 2>&1 | grep -E "BM_|rror" ;;
    bench)
      ./build/dsa-parity bench --benchmark_out=$OUT/bench.json --benchmark_out_format=json 2>&1 | grep -E "BM_|rror" ;;
    oraclebench)
      timeout 200 ./build/check/gpu/gpu_oracle_bench > $OUT/gpu-oracle-bench.json 2> $OUT/gpu-oracle-bench.log; echo "exit $?"
      tail -c 1500 $OUT/gpu-oracle-bench.json ;;
    fuzz|fuzzcpu|fuzzgpu)
      o=$ORACLE; [ $stage = fuzzcpu ] && o=cpu; [ $stage = fuzzgpu ] && o=gpu
      for s in ${NIGHTLY_SEEDS:-$SEED}; do
        f=fuzz-nightly-$o; [ -n "$NIGHTLY_SEEDS" ] && f=$f-seed$s
        run_watched $OUT/$f.json $OUT/$f.log ./build/dsa-parity fuzz --backend cuda --oracle $o --profile nightly \
          --seed $s --time-budget $NIGHTLY_S ${CASE_TIMEOUT_S:+--case-timeout $CASE_TIMEOUT_S} --report $OUT/$f.json
        echo "exit $? (seed $s)"; tail -8 $OUT/$f.log; grep -h "^stopped:" $OUT/$f.log
      done ;;
    production)
      ./build/dsa-parity fuzz --backend cuda --oracle $ORACLE --profile production --seed $SEED --time-budget $PROD_S \
        --report $OUT/fuzz-production.json > $OUT/fuzz-production.log 2>&1; echo "exit $?"; tail -6 $OUT/fuzz-production.log ;;
    both)
      ./build/dsa-parity fuzz --backend cuda --oracle both --profile nightly --seed $SEED --time-budget $BOTH_S \
        --report $OUT/fuzz-nightly-both.json > $OUT/fuzz-nightly-both.log 2>&1; echo "exit $?"
      grep -A40 "oracle agreement" $OUT/fuzz-nightly-both.log | head -40; grep -E "passed|case time" $OUT/fuzz-nightly-both.log | tail -3 ;;
    stallhunt)
      # The cases in flight when the nightly at seed 115 stalled (25th session; the CPU draw of random
      # #160-#162 as case files), replayed in order with the backend running ahead of the GPU oracle's
      # judge, HUNT_ROUNDS (20) times, a case given up after 60 s (--case-timeout: the stall watch
      # writes the report, naming each thread's phase: under DSA_TRACE the fused backend's phases end
      # with their kernels, so a kernel that never ends is named), each round capped at 120 s, with
      # a stall dump; then each case alone under
      # compute-sanitizer's initcheck (device memory read before it was written) and racecheck.
      d=$(mktemp -d); traces=$(mktemp -d); cp reports/device/2026-12-07-s25-seed115-random-*.json $d/
      for k in $(seq ${HUNT_ROUNDS:-20}); do
        DSA_TRACE=$traces/trace-$k.json run_watched $OUT/hunt-$k.json $OUT/hunt-$k.log timeout -s TERM -k 30 120 ./build/dsa-parity replay $d \
          --backend cuda --oracle gpu --case-timeout 60 --report $OUT/hunt-$k.json
        echo "round $k exit $?"; grep -h "^stopped:" $OUT/hunt-$k.log
      done
      cs=$(command -v compute-sanitizer || echo ${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer)
      for f in $d/*-161.json $d/*-162.json $d/*-160.json; do  # the two in flight at the stall first
        for tool in initcheck racecheck; do
          timeout 150 $cs --tool $tool --error-exitcode 9 ./build/dsa-parity repro $f --backend cuda --oracle cpu \
            > $OUT/sanitizer-$tool-$(basename $f .json).log 2>&1
          rc=$?; echo "$tool $(basename $f .json): exit $rc"
        done
      done ;;
    cases)
      ./build/dsa-parity replay $CASES --backend cuda --oracle $ORACLE --report $OUT/cases.json > $OUT/cases.log 2>&1
      echo "exit $?"; tail -8 $OUT/cases.log ;;
    mutant)
      J=16 tools/kernel_mutants.sh $MUTANTS 2>&1 | tee $OUT/kernel-mutants.log ;;
    torch)
      (cd python && DSA_PARITY_BIN=$OLDPWD/build/dsa-parity timeout 300 python3 -m unittest -v tests.test_torch_reference) \
        2>&1 | tail -12 | tee $OUT/torch-tests.log
      DSA_TORCH_DEVICE=cuda PYTHONPATH=python timeout 200 ./build/dsa-parity fuzz --backend \
        exec2:"python3 -m dsa_parity.examples.torch_reference" --profile smoke --cases 40 --corpus none --seed $SEED \
        --report $OUT/fuzz-torch-cuda.json > $OUT/fuzz-torch-cuda.log 2>&1; echo "exit $?"; tail -5 $OUT/fuzz-torch-cuda.log ;;
    repeat)
      ./build/dsa-parity fuzz --backend cuda --oracle gpu --profile nightly --seed $SEED --time-budget ${REPEAT_S:-90} \
        --repeat ${REPEAT:-20} --corpus none --report $OUT/fuzz-repeat.json > $OUT/fuzz-repeat.log 2>&1; echo "exit $?"
      tail -4 $OUT/fuzz-repeat.log ;;
    megatron)
      export MEGATRON_PATH=$PWD/.megatron DSA_MEGATRON_DEVICE=cuda
      export DSA_MEGATRON_CP_DEVICE=${MEGATRON_CP_DEVICE:-cpu} DSA_MEGATRON_CP_TIMEOUT=${MEGATRON_CP_TIMEOUT:-60}
      [ -f .megatron/COMMIT ] && echo "Megatron-LM $(cat .megatron/COMMIT)" | tee $OUT/megatron-commit.txt
      (cd python && DSA_PARITY_BIN=$OLDPWD/build/dsa-parity timeout 300 python3 -m unittest -v ${MEGATRON_TESTS:-tests.test_megatron_adapter}) \
        > $OUT/megatron-tests.log 2>&1; grep -E "^(FAIL|ERROR):|^Ran |^OK|^FAILED" $OUT/megatron-tests.log
      for run in ${MEGATRON_RUNS:-unfused:float32 unfused:bfloat16 streaming:bfloat16 tilelang:bfloat16}; do
        IFS=: read k dt entry <<< "$run"; entry=${entry:-functions}; tag=$k-$dt
        [ $entry = functions ] || tag=$tag-$entry
        scratch=$(mktemp -d); cp -r cases/edge $scratch/
        for prof in ${MEGATRON_PROFILES:-nightly production}; do
          budget=${MEGATRON_S:-50}; corpus=$scratch; tokens=${MEGATRON_MAX_TOKENS:-65536}
          cpflag=
          [ $prof = production ] && { budget=${MEGATRON_PROD_S:-40}; corpus=none; tokens=${MEGATRON_PROD_TOKENS:-4096}
                                      [ -n "$MEGATRON_PROD_CP" ] && cpflag="--cp $MEGATRON_PROD_CP"; }
          shrink=--shrink; [ "${MEGATRON_SHRINK:-1}" = 0 ] && shrink=
          PYTHONPATH=python DSA_MEGATRON_KERNELS=$k DSA_MEGATRON_DTYPE=$dt DSA_MEGATRON_ENTRY=$entry \
            DSA_MEGATRON_MAX_TOKENS=$tokens timeout $((budget + 120)) ./build/dsa-parity \
            fuzz --backend exec2:"python3 -m dsa_parity.adapters.megatron" --profile $prof --seed $SEED --oracle $ORACLE \
            --time-budget $budget $shrink $cpflag --corpus $corpus --report $OUT/megatron-$prof-$tag.json \
            > $OUT/megatron-$prof-$tag.log 2>&1
          echo "$prof $tag: exit $?"; grep -E "^[0-9]+ cases:|^exec2:" $OUT/megatron-$prof-$tag.log | cut -c1-160
        done
        [ -d $scratch/regressions ] && cp -r $scratch/regressions $OUT/megatron-shrunk-$tag
      done ;;
    mpicuda)
      cmake --build build -j16 --target mpi_cli_tests >> $OUT/build.log 2>&1 || echo "mpi_cli_tests did not build"
      # As root Open MPI wants both variables; --bind-to none: rank 0's CPU oracle keeps every core.
      export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
      mpi="mpirun --allow-run-as-root --bind-to none"
      ngpu=$(nvidia-smi -L | wc -l)
      echo "GPUs: $ngpu"
      $mpi -np 1 ./build/dsa-parity fuzz --backend cuda --comm mpi --profile nightly --time-budget ${MPI_S:-60} \
        --seed $SEED --report $OUT/fuzz-mpicuda-np1.json --junit $OUT/fuzz-mpicuda-np1.xml > $OUT/fuzz-mpicuda-np1.log 2>&1
      echo "np 1 exit $?"; tail -6 $OUT/fuzz-mpicuda-np1.log
      python3 reports/device/compare_verdicts.py export $OUT/fuzz-mpicuda-np1.json $OUT/mpicuda-np1-cases
      ./build/dsa-parity replay $OUT/mpicuda-np1-cases --backend cuda --comm local --report $OUT/replay-mpicuda-np1-local.json \
        > $OUT/replay-mpicuda-np1-local.log 2>&1; echo "replay --comm local exit $?"
      python3 reports/device/compare_verdicts.py compare $OUT/fuzz-mpicuda-np1.json $OUT/replay-mpicuda-np1-local.json \
        2>&1 | tee $OUT/mpicuda-np1-compare.log | tail -12
      timeout 120 $mpi -np $((ngpu + 1)) --oversubscribe ./build/dsa-parity fuzz --backend cuda --comm mpi --cases 1 \
        --corpus none > $OUT/mpicuda-refusal.log 2>&1
      echo "np $((ngpu + 1)) exit $? (2 expected: more ranks than GPUs)"; grep -m1 "NCCL cannot" $OUT/mpicuda-refusal.log
      for np in 2 4 8; do
        [ $np -le $ngpu ] || break
        $mpi -np $np ./build/dsa-parity fuzz --backend cuda --comm mpi --profile nightly --time-budget ${MPI_S:-60} \
          --seed $SEED --report $OUT/fuzz-mpicuda-np$np.json > $OUT/fuzz-mpicuda-np$np.log 2>&1
        echo "np $np exit $?"; tail -4 $OUT/fuzz-mpicuda-np$np.log
      done
      timeout ${MPI_TESTS_S:-400} ./build/tools/mpi_cli_tests --gtest_filter='MpiCuda*' 2>&1 | tee $OUT/mpicuda-tests.log | \
        grep -E "PASSED|FAILED|Failure|SKIPPED|skip" ;;
    replay)
      ./build/dsa-parity replay cases/ --backend cuda --report $OUT/replay.json > $OUT/replay.log 2>&1; echo "exit $?"
      tail -6 $OUT/replay.log ;;
    *) echo "unknown stage $1"; return 2 ;;
  esac
}
set -m  # each stage in a process group of its own, so that the deadline cuts all of it
for stage in $STAGES; do
  left=$((DEADLINE_S - SECONDS))
  if [ $left -le 5 ]; then echo "== $stage SKIPPED: past the deadline (DEADLINE_S=$DEADLINE_S)"; continue; fi
  echo "== $stage $(date -u +%T) ($SECONDS s; $left s to the deadline)"
  run_stage "$stage" &
  stage_pid=$!
  ( sleep $left; kill -TERM -- -$stage_pid 2>/dev/null || kill -TERM $stage_pid 2>/dev/null ) &
  guard=$!
  wait $stage_pid
  kill -- -$guard 2>/dev/null; wait $guard 2>/dev/null
  [ $SECONDS -ge $DEADLINE_S ] && echo "== $stage CUT at the deadline"
  pack
done
echo "done $(date -u +%T) ($SECONDS s)"

