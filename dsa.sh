#!/usr/bin/env bash
# The README's two commands. Each installs what is missing (as root, from Debian packages),
# configures and builds into build/, then:
#   ./dsa.sh test          runs every test (ctest); what .ci/run calls
#   ./dsa.sh fuzz [ARGS]   runs `build/dsa-parity fuzz ARGS` on the default backend
set -euo pipefail
cd "$(dirname "$0")"

mode=${1:-}
case "$mode" in
  test|fuzz) shift ;;
  *) echo "usage: ./dsa.sh test | ./dsa.sh fuzz [dsa-parity fuzz flags]" >&2; exit 2 ;;
esac

packages=(cmake make g++ libeigen3-dev nlohmann-json3-dev libvalijson-dev libgtest-dev libbenchmark-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "dsa.sh: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "dsa.sh: missing packages: ${missing[*]} (run as root to install them)" >&2
    exit 3
  fi
fi

jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${DSA_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$jobs"

if [[ $mode == test ]]; then
  ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900
else
  exec build/dsa-parity fuzz "$@"
fi
