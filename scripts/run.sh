#!/usr/bin/env bash
# Sets up a fresh machine (Debian packages only), builds kvserve and starts the
# daemon on the embedded default model (builtin:tiny): gRPC on port 50051,
# Prometheus metrics on 9400. Arguments go to kvserve, e.g.
#   bash scripts/run.sh --model=builtin:small --port=50052
# Ctrl-C or SIGTERM drains in-flight requests and stops it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
KVSERVE_SKIP_PYTHON=1 "$root/scripts/setup.sh"
"$root/scripts/build.sh" >/dev/null
exec "${KVSERVE_BUILD_DIR:-$root/build}/server/kvserve" "$@"
