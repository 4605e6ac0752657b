#!/usr/bin/env bash
# The README's two commands. Each installs what is missing (as root, from Debian packages),
# configures and builds into build/, then:
#   ./dsa.sh test          runs every test (ctest), then a short fuzz under ASan+UBSan (the
#                          asan-ubsan preset, build-asan/); what .ci/run calls
#   ./dsa.sh fuzz [ARGS]   runs `build/dsa-parity fuzz ARGS` on the default backend
set -euo pipefail
cd "$(dirname "$0")"

mode=${1:-}
case "$mode" in
  test|fuzz) shift ;;
  *) echo "usage: ./dsa.sh test | ./dsa.sh fuzz [dsa-parity fuzz flags]" >&2; exit 2 ;;
esac

packages=(cmake make g++ libeigen3-dev nlohmann-json3-dev libvalijson-dev libgtest-dev libbenchmark-dev libcli11-dev python3 python3-numpy
          libopenmpi-dev openmpi-bin)
# What only the tests use: CPU torch (the PyTorch example adapter) and a headless browser (the
# --html page rendered for real). About two minutes to install on a fresh machine.
[[ $mode == test ]] && packages+=(python3-torch chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
t_install=$SECONDS
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "dsa.sh: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    echo "dsa.sh: packages installed in $((SECONDS - t_install)) s" >&2
  else
    echo "dsa.sh: missing packages: ${missing[*]} (run as root to install them)" >&2
    exit 3
  fi
fi

jobs=$(nproc)
t0=$SECONDS
stage() { echo "dsa.sh: $1 done in $((SECONDS - t0)) s" >&2; t0=$SECONDS; }
# Without a visible GPU the CUDA code is built only to prove it compiles: Hopper's SASS alone, not
# also the portable PTX (a third of nvcc's time). DSA_CMAKE_ARGS can set CMAKE_CUDA_ARCHITECTURES.
archs=()
nvidia-smi -L >/dev/null 2>&1 || archs=(-DCMAKE_CUDA_ARCHITECTURES=90a-real)
# A unity build (each target's .cpp files compiled a batch at a time, README "Layout of the source"):
# half the compiler's CPU time of a fresh build; DSA_CMAKE_ARGS=-DCMAKE_UNITY_BUILD=OFF turns it off.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON "${archs[@]}" ${DSA_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$jobs"
stage build

if [[ $mode == test ]]; then
  ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900
  stage ctest
  # The sanitizer fuzz: the CLI built with AddressSanitizer and UndefinedBehaviorSanitizer runs
  # smoke cases on the CPU backends, a mutant among them; any sanitizer report fails the run.
  cmake --preset asan-ubsan >/dev/null
  cmake --build build-asan -j "$jobs" --target dsa-parity >build-asan.log 2>&1 || { tail -30 build-asan.log >&2; exit 1; }
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  build-asan/dsa-parity fuzz --backend lowp --profile smoke --cases 60 --seed 7 --corpus cases >/dev/null
  build-asan/dsa-parity fuzz --backend reference --profile smoke --cases 20 --seed 8 --corpus none >/dev/null
  rc=0; build-asan/dsa-parity fuzz --backend mutant:kl_reversed --profile smoke --cases 10 --seed 9 --corpus none \
    --report build-asan/mutant-report.json >/dev/null || rc=$?
  [[ $rc -eq 1 ]] || { echo "dsa.sh: sanitizer fuzz of a mutant exited $rc, expected 1 (caught)" >&2; exit 1; }
  stage "sanitizer build and fuzz"
  echo "sanitizer fuzz (ASan+UBSan): 110 cases clean (corpus included), the mutant caught"
else
  exec build/dsa-parity fuzz "$@"
fi
