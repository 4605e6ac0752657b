#!/usr/bin/env bash
# Planted kernel bugs (README "Planted kernel bugs"): builds the fused tests once per kernel mutant
# through CMake (-DDSA_MUTANT=NAME, the only switch of the kernels' mutant #if blocks), runs the
# tests that must catch it and prints one line per mutant: CAUGHT (some test failed) or MISSED.
# Usage on a GPU machine, from a checkout: tools/kernel_mutants.sh [NAME ...]   (default: all)
# Build folders: build-mutant/NAME (git-ignored), logs mutant-NAME.log inside. Exit 1 when a mutant is missed.
# Environment: J (build jobs), CUDA_ARCHS (CMAKE_CUDA_ARCHITECTURES, default the project's), FILTER (a
# gtest filter: run only the tests that must catch the mutants named, default all of fused_tests),
# BUILD_DIR (an already configured build folder to reuse for every mutant: only what the define
# touches is rebuilt, and the folder is reconfigured without a mutant at the end).
set -uo pipefail
cd "$(dirname "$0")/.."
J=${J:-$(nproc)}
all=(causal_end_off_by_one pad_keys_visible neg1_read_as_row0 trust_noncausal_indices base2_lse_backward
     dlogit_missing_delta dq_missing_scale zigzag_chunk_swap no_key_grad_reduce_scatter relu_grad_one_at_zero
     streaming_kl_drop_last_chunk kl_reversed topk_lowest_on_ties duplicate_keys_counted)
names=("$@")
((${#names[@]})) || names=("${all[@]}")
missed=0
for m in "${names[@]}"; do
  dir=${BUILD_DIR:-build-mutant/$m}
  if ! { cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DDSA_MUTANT="$m" ${CUDA_ARCHS:+-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS} >/dev/null &&
         cmake --build "$dir" -j "$J" --target fused_tests >"$dir/mutant-$m.build.log" 2>&1; }; then
    echo "mutant $m: BUILD FAILED (see $dir/mutant-$m.build.log)"; missed=1; continue
  fi
  timeout 300 "$dir/fused/fused_tests" ${FILTER:+--gtest_filter=$FILTER} >"$dir/mutant-$m.log" 2>&1
  rc=$?
  failing=$(grep -c '^\[  FAILED  \] [A-Za-z]' "$dir/mutant-$m.log")
  if ((rc != 0 && failing > 0)); then echo "mutant $m: CAUGHT by $failing tests"; else echo "mutant $m: MISSED (exit $rc)"; missed=1; fi
  grep -E '^\[  FAILED  \] [A-Za-z]' "$dir/mutant-$m.log" | head -4
done
[ -n "${BUILD_DIR:-}" ] && cmake -S . -B "$BUILD_DIR" -DDSA_MUTANT= >/dev/null
exit $missed
