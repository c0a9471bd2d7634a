# Shared helpers of the serving benchmarks (sourced by bench/serving/*.sh).
#
# Environment:
#   KVSERVE_BUILD_DIR    CMake build dir holding the daemon and the load generator
#                        (its server/ and tools/loadgen/; default: <repo>/build)
#   KVSERVE_RESULTS_DIR  where results go (default: <repo>/bench/results)
#   KVSERVE_PYTHON       Python with matplotlib (default: <repo>/.venv/bin/python)
#
# Every daemon a script starts is stopped (SIGTERM, by its own pid) when the
# script exits, whatever the reason.

set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${KVSERVE_BUILD_DIR:-$REPO_DIR/build}"
RESULTS_ROOT="${KVSERVE_RESULTS_DIR:-$REPO_DIR/bench/results}"
PYTHON="${KVSERVE_PYTHON:-$REPO_DIR/.venv/bin/python}"
KVSERVE="$BUILD_DIR/server/kvserve"
LOADGEN="$BUILD_DIR/tools/loadgen/kvserve-loadgen"
PLOT="$REPO_DIR/tools/loadgen/plot.py"
TABLE="$REPO_DIR/bench/serving/table.py"

for bin in "$KVSERVE" "$LOADGEN"; do
  if [[ ! -x "$bin" ]]; then
    echo "missing $bin: build it first (ninja -C $BUILD_DIR kvserve kvserve-loadgen)" >&2
    exit 2
  fi
done

DAEMON_PID=""
GRPC_ADDR=""
METRICS_URL=""

# results_dir NAME: creates and prints bench/results/NAME (emptied first).
results_dir() {
  local dir="$RESULTS_ROOT/$1"
  rm -rf "$dir"
  mkdir -p "$dir"
  echo "$dir"
}

# start_daemon LOG_PREFIX FLAG...: starts kvserve on loopback ephemeral ports
# and waits for its ready line; sets DAEMON_PID, GRPC_ADDR, METRICS_URL.
start_daemon() {
  local prefix="$1"
  shift
  "$KVSERVE" --host=127.0.0.1 --port=0 --metrics_host=127.0.0.1 --metrics_port=0 "$@" \
    >"$prefix.stdout" 2>"$prefix.stderr" </dev/null &
  DAEMON_PID=$!
  local line=""
  for _ in $(seq 1200); do  # up to 120 s
    line="$(grep -m1 '^kvserve ready' "$prefix.stdout" 2>/dev/null || true)"
    [[ -n "$line" ]] && break
    if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
      echo "kvserve exited before its ready line:" >&2
      tail -20 "$prefix.stderr" >&2
      exit 1
    fi
    sleep 0.1
  done
  if [[ -z "$line" ]]; then
    echo "kvserve not ready after 120 s" >&2
    exit 1
  fi
  # kvserve ready grpc=127.0.0.1:PORT metrics=127.0.0.1:PORT
  GRPC_ADDR="$(sed -E 's/.*grpc=([^ ]+).*/\1/' <<<"$line")"
  METRICS_URL="http://$(sed -E 's/.*metrics=([^ ]+).*/\1/' <<<"$line")/metrics"
}

# stop_daemon: SIGTERM the daemon started last and wait for it.
stop_daemon() {
  if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID"
    wait "$DAEMON_PID" 2>/dev/null || true
  fi
  DAEMON_PID=""
}
trap stop_daemon EXIT

# loadgen OUT_PREFIX FLAG...: runs kvserve-loadgen against the daemon started
# last, writing OUT_PREFIX.json / .csv / .txt (its stdout, also shown).
loadgen() {
  local prefix="$1"
  shift
  local rc=0
  "$LOADGEN" --address="$GRPC_ADDR" --metrics_url="$METRICS_URL" \
    --output_json="$prefix.json" --output_csv="$prefix.csv" "$@" | tee "$prefix.txt" || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "kvserve-loadgen exited with $rc (1: some requests failed; see $prefix.json)" >&2
  fi
  return 0
}

# plot OUT_DIR ARGS...: tools/loadgen/plot.py (skipped with a note when the
# Python has no matplotlib).
plot() {
  local out="$1"
  shift
  if "$PYTHON" -c 'import matplotlib' 2>/dev/null; then
    "$PYTHON" "$PLOT" --out_dir "$out" "$@" >/dev/null
  else
    echo "note: $PYTHON has no matplotlib; no PNG plots (pip install -r tests/oracle/requirements.txt)" >&2
  fi
}
