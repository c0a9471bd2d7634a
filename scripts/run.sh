#!/usr/bin/env bash
# Sets up a fresh machine (Debian packages only), builds kvserve and runs its
# main job on the embedded default model. Arguments go to kvserve-generate,
# e.g.  bash scripts/run.sh --model=builtin:small --prompt="Hi" --max_tokens=16
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
KVSERVE_SKIP_PYTHON=1 "$root/scripts/setup.sh"
"$root/scripts/build.sh" >/dev/null
exec "${KVSERVE_BUILD_DIR:-$root/build}/server/kvserve-generate" "$@"
