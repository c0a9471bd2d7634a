#!/usr/bin/env bash
# Configures and builds kvserve (Release) into build/. Extra args go to cmake.
# KVSERVE_TARGETS="a b" builds only those targets (and what they need).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${KVSERVE_BUILD_DIR:-$root/build}"
jobs="${KVSERVE_JOBS:-$(nproc)}"
# The CUDA backend is built where the toolkit is (CMake finds nvcc on PATH or
# through CUDACXX); KVSERVE_CUDA=OFF in the environment builds the CPU backend only.
if [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]] && ! command -v nvcc >/dev/null; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -S "$root" -B "$build" -G Ninja -DKVSERVE_CUDA="${KVSERVE_CUDA:-ON}" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
# shellcheck disable=SC2086  # KVSERVE_TARGETS is a list of names
cmake --build "$build" -j "$jobs" ${KVSERVE_TARGETS:+--target $KVSERVE_TARGETS}
