#!/usr/bin/env bash
# Slow end-to-end check of the container image, run by hand (not by CI or
# ctest: it compiles kvserve inside the image, 10+ minutes on 2 cores).
#
#   sudo bash deploy/image_test.sh
#
# 1. Finds a debian:bookworm-slim image in the local store, or makes one
#    with debootstrap (minbase) and imports it as localhost/debian:bookworm-slim
#    (no registry needed; the build still needs Debian's package mirror).
# 2. Builds the CPU image from the Dockerfile with that base (podman build,
#    docker format so that the HEALTHCHECK is kept).
# 3. Checks the image: every shared library resolves, the user is not root.
# 4. Runs it with its ports published on loopback (free ports), waits for the
#    HEALTHCHECK to pass, sends one Generate through the published gRPC port
#    with the image's kvserve-client, checks the tokens and /metrics.
# 5. Stops it (SIGTERM: the daemon drains and exits 0).
# 6. With KVSERVE_TEST_MODEL: the same with that checkpoint mounted.
#
# Environment:
#   KVSERVE_ENGINE       podman (default) or docker
#   KVSERVE_ENGINE_ARGS  global options for every engine call, e.g.
#                        "--runtime runc" where crun cannot run containers
#                        (cgroup v1/hybrid hosts); podman also reads
#                        CONTAINERS_CONF (e.g. a containers.conf with
#                        `default_ulimits = []` where setrlimit is not allowed)
#   KVSERVE_IMAGE        tag to build (default localhost/kvserve:cpu-test)
#   KVSERVE_BASE_IMAGE   base image to use instead of finding/making one
#   KVSERVE_BUILD_JOBS   parallel compile jobs in the image build (default 2)
#   KVSERVE_NETWORK      host: run with --network=host instead of published
#                        ports (where the engine's port forwarding does not work)
#   KVSERVE_SKIP_BUILD=1 test an already built KVSERVE_IMAGE
#   KVSERVE_TEST_MODEL   a Hugging Face checkpoint directory: also serve it
#                        mounted at /models/NAME (--model=/models/NAME) and
#                        generate from it (readable by uid 10001)
# Needs: podman (apt-get install podman buildah) or docker; debootstrap when
# no base image is present; root (debootstrap, and rootful podman).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
engine=${KVSERVE_ENGINE:-podman}
read -r -a engine_args <<< "${KVSERVE_ENGINE_ARGS:-}"
image=${KVSERVE_IMAGE:-localhost/kvserve:cpu-test}
jobs=${KVSERVE_BUILD_JOBS:-2}
network=${KVSERVE_NETWORK:-}
container=kvserve-image-test-$$
work=$(mktemp -d)

eng() { "$engine" "${engine_args[@]}" "$@"; }
log() { echo "image_test: $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }
started=()
cleanup() {
  for c in "${started[@]}"; do eng rm -f "$c" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

command -v "$engine" >/dev/null || fail "$engine not found (apt-get install -y podman buildah debootstrap)"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# --- 1. base image -----------------------------------------------------------
base=${KVSERVE_BASE_IMAGE:-}
if [ -z "$base" ]; then
  for candidate in debian:bookworm-slim docker.io/library/debian:bookworm-slim \
                   localhost/debian:bookworm-slim; do
    if eng image inspect "$candidate" >/dev/null 2>&1; then
      base=$candidate
      break
    fi
  done
fi
if [ -z "$base" ]; then
  command -v debootstrap >/dev/null || fail "no debian:bookworm-slim image and no debootstrap"
  log "no debian:bookworm-slim image: making one with debootstrap"
  debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap"; }
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  tar -C "$work/rootfs" -c . | eng import - localhost/debian:bookworm-slim >/dev/null
  base=localhost/debian:bookworm-slim
fi
log "base image: $base"

# --- 2. build ----------------------------------------------------------------
if [ "${KVSERVE_SKIP_BUILD:-0}" != "1" ]; then
  format=()
  [ "$engine" = podman ] && format=(--format docker)
  log "building $image (VARIANT=cpu, BUILD_JOBS=$jobs); this compiles kvserve"
  start=$(date +%s)
  eng build "${format[@]}" --network=host \
    --build-arg VARIANT=cpu --build-arg BASE_IMAGE="$base" --build-arg RUNTIME_IMAGE="$base" \
    --build-arg BUILD_JOBS="$jobs" -t "$image" -f "$root/Dockerfile" "$root" \
    >"$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; fail "image build"; }
  log "built in $(( $(date +%s) - start )) s; $(grep -m1 '^runtime packages:' "$work/build.log" || true)"
fi
eng image inspect "$image" >/dev/null || fail "no image $image"

# --- 3. static checks ----------------------------------------------------------
for f in kvserve kvserve-client libkvserve_sentencepiece.so; do
  out=$(eng run --rm --entrypoint ldd "$image" "/opt/kvserve/bin/$f") || fail "ldd $f"
  if grep -q 'not found' <<<"$out"; then
    echo "$out" >&2
    fail "$f: unresolved libraries in the image"
  fi
done
uid=$(eng run --rm --entrypoint id "$image" -u)
[ "$uid" != 0 ] || fail "the image runs as root"
healthcheck=$(eng image inspect --format '{{json .Config.Healthcheck}}' "$image" 2>/dev/null || true)
case "$healthcheck" in
  *kvserve-client*health*) ;;
  *) fail "no HEALTHCHECK in the image (podman: build with --format docker): $healthcheck" ;;
esac
log "image ok: libraries resolve, uid $uid, healthcheck $healthcheck"

# --- 4. run --------------------------------------------------------------------
# As the Kubernetes manifests run it: read-only root, no capabilities.
hardening=(--read-only --tmpfs /tmp --cap-drop=ALL --security-opt=no-new-privileges --shm-size=256m)

# start NAME [run options...] [-- daemon flags...]: sets grpc_port, metrics_port.
start() {
  local name=$1
  shift
  local opts=()
  while [ "$#" -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  [ "$#" -gt 0 ] && shift
  if [ "$network" = host ]; then
    grpc_port=50051
    metrics_port=9400
    eng run -d --name "$name" --network=host "${hardening[@]}" "${opts[@]}" "$image" "$@" >/dev/null
  else
    grpc_port=$(free_port)
    metrics_port=$(free_port)
    eng run -d --name "$name" "${hardening[@]}" "${opts[@]}" \
      -p "127.0.0.1:$grpc_port:50051" -p "127.0.0.1:$metrics_port:9400" "$image" "$@" >/dev/null
  fi
  started+=("$name")
  log "container $name: gRPC 127.0.0.1:$grpc_port, metrics 127.0.0.1:$metrics_port"
}

# wait_healthy NAME: until the image's HEALTHCHECK passes (SERVING).
wait_healthy() {
  local healthy=0
  for _ in $(seq 1 120); do
    if [ "$engine" = podman ]; then
      eng healthcheck run "$1" >/dev/null 2>&1 && { healthy=1; break; }
    else
      [ "$(eng inspect -f '{{.State.Health.Status}}' "$1")" = healthy ] && { healthy=1; break; }
    fi
    [ "$(eng inspect -f '{{.State.Running}}' "$1")" = true ] || break
    sleep 1
  done
  if [ "$healthy" != 1 ]; then
    eng logs "$1" 2>&1 | tail -30 >&2
    fail "$1 did not become healthy"
  fi
  eng logs "$1" 2>/dev/null | grep -q "kvserve ready grpc=0.0.0.0:50051 metrics=0.0.0.0:9400" \
    || fail "no ready line in the stdout of $1"
  log "$1 is healthy"
}

# generate PROMPT: one Generate through the published port, with the image's
# client on the host network; 8 tokens, finish reason length.
generate() {
  local out
  out=$(eng run --rm --network=host --entrypoint kvserve-client "$image" \
          --address="127.0.0.1:$grpc_port" generate "$1" \
          --max_tokens=8 --ignore_eos --temperature=0 --json) || fail "Generate"
  echo "$out"
  python3 - "$out" <<'EOF' || fail "unexpected Generate output"
import json, sys
r = json.loads(sys.argv[1])
assert len(r["token_ids"]) == 8, r
assert r["finish_reason"].lower().endswith("length"), r
EOF
}

scrape() {
  python3 -c 'import sys, urllib.request; print(urllib.request.build_opener(urllib.request.ProxyHandler({})).open(sys.argv[1], timeout=10).read().decode())' \
    "http://127.0.0.1:$metrics_port/metrics" || fail "scrape /metrics"
}

# stop NAME: SIGTERM; the daemon drains and exits 0.
stop() {
  local code
  eng stop -t 45 "$1" >/dev/null
  code=$(eng inspect -f '{{.State.ExitCode}}' "$1")
  eng logs "$1" 2>&1 | tail -2 >&2
  [ "$code" = 0 ] || fail "$1: exit code $code after SIGTERM"
}

start "$container"
wait_healthy "$container"
generate "Hello, kvserve!"
metrics=$(scrape)
grep -E '^kvserve_generation_tokens_total 8(\.0*)?$' <<<"$metrics" \
  || fail "kvserve_generation_tokens_total is not 8"
grep -E '^kvserve_server_info\{' <<<"$metrics"

# --- 5. stop -------------------------------------------------------------------
stop "$container"
log "builtin:tiny: ok"

# --- 6. a mounted checkpoint (KVSERVE_TEST_MODEL) -------------------------------
if [ -n "${KVSERVE_TEST_MODEL:-}" ]; then
  model_dir=$(cd "$KVSERVE_TEST_MODEL" && pwd)
  model_name=$(basename "$model_dir")
  start "$container-model" -v "$model_dir:/models/$model_name:ro" -- \
    "--model=/models/$model_name" --drain_timeout_s=30
  wait_healthy "$container-model"
  generate "Hello, kvserve!"
  scrape | grep -E "^kvserve_server_info\{.*model=\"/models/$model_name\"" \
    || fail "kvserve_server_info does not name /models/$model_name"
  stop "$container-model"
  log "/models/$model_name: ok"
fi
log "PASSED ($image)"
