#!/usr/bin/env bash
# Configures and builds kvserve (Release) into build/. Extra args go to cmake.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${KVSERVE_BUILD_DIR:-$root/build}"
jobs="${KVSERVE_JOBS:-$(nproc)}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$jobs"
