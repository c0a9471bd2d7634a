#!/usr/bin/env bash
# Installs everything kvserve needs on a fresh Debian 12 machine: the C++
# toolchain and libraries from Debian's packages, and the Python test oracle
# (transformers, torch, tokenizers, sentencepiece) from PyPI into a virtual
# environment that .venv links to (below).
# Idempotent: a second run installs nothing and takes seconds.
#   KVSERVE_SETUP=daemon   only the packages that build and run the daemon (scripts/run.sh)
#   KVSERVE_SKIP_PYTHON=1  everything but the Python oracle
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# What building and running the daemon needs (the Dockerfile's build stage
# installs the same list; GTest because the top-level CMakeLists configures
# the test tree).
debian_packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev
  libabsl-dev libboost-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libsentencepiece-dev libpcre2-dev libutf8proc-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc prometheus-cpp-dev
  libssl-dev curl
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev  # KV-cache events: server/kv_events/
  python3 python3-pip python3-venv  # pip fetches xgrammar's source distribution (below)
)

# What the test suite and the benchmarks need besides.
test_packages=(
  libbenchmark-dev
  prometheus openssl  # promtool on /metrics and the alert rules; certificates for the TLS tests
  clang libclang-rt-14-dev  # the ASan/UBSan build and libFuzzer (scripts/test_sanitizers.sh)
  ccache  # the three builds of a CI run reuse the last run's objects (CMakeLists.txt)
)

# KVSERVE_SETUP=daemon: only what the daemon needs (scripts/run.sh), no Python.
profile="${KVSERVE_SETUP:-all}"
case "$profile" in
  daemon) KVSERVE_SKIP_PYTHON=1 ;;
  all)
    debian_packages+=("${test_packages[@]}")
    # kubectl renders the Kubernetes manifests in the deploy tests. Debian's
    # kubernetes-client provides it unless another kubectl package already does
    # (they ship the same file and cannot both be installed).
    command -v kubectl >/dev/null || debian_packages+=(kubernetes-client)
    ;;
  *) echo "setup: KVSERVE_SETUP must be daemon or all, got '$profile'" >&2; exit 2 ;;
esac

missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# xgrammar's pinned source distribution (structured outputs), which the build
# compiles into the daemon: scripts/fetch_xgrammar.sh, into ~/.cache/kvserve/sdist.
"$root/scripts/fetch_xgrammar.sh"

if [ "${KVSERVE_SKIP_PYTHON:-0}" != "1" ]; then
  # The environment lives outside the checkout, one per requirements file
  # (its sha256 names it), and .venv links to it: a fresh clone on a machine
  # that already built the same pins (CI's clean clones) reuses it instead of
  # downloading ~3 GB of wheels again. KVSERVE_VENV_CACHE moves it. A .venv
  # that is a directory of its own (an older checkout's) is used in place.
  req="$root/tests/oracle/requirements.txt"
  want=$(sha256sum "$req" | cut -d' ' -f1)
  venv="$root/.venv"
  if [ ! -d "$venv" ] || [ -L "$venv" ]; then
    cache="${KVSERVE_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvserve}"
    venv="$cache/venv-${want:0:16}"
    mkdir -p "$cache"
  fi
  stamp="$venv/.requirements.sha256"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "setup: creating the Python test oracle in $venv (transformers, torch, tokenizers)"
    python3 -m venv "$venv"
    # No wheel cache: torch's wheels alone are ~3 GB, and the environment
    # already takes ~6 GB of disk.
    "$venv/bin/python" -m pip install -q --no-cache-dir --upgrade pip
    "$venv/bin/python" -m pip install -q --no-cache-dir -r "$req"
    echo "$want" > "$stamp"
  fi
  # The client software the tests drive (lm-eval, agent frameworks), layered
  # on the same environment with the oracle's pins as constraints; its own
  # stamp, so that a change to it installs only what changed.
  clients="$root/tests/clients/requirements.txt"
  want_clients=$( (cat "$req" "$clients") | sha256sum | cut -d' ' -f1)
  clients_stamp="$venv/.clients.sha256"
  if [ ! -f "$clients_stamp" ] || [ "$(cat "$clients_stamp")" != "$want_clients" ]; then
    echo "setup: installing the client software the tests drive into $venv (lm-eval, openai-agents, litellm, langchain-openai)"
    "$venv/bin/python" -m pip install -q --no-cache-dir -r "$clients" -c "$req"
    echo "$want_clients" > "$clients_stamp"
  fi
  [ "$venv" = "$root/.venv" ] || ln -sfn "$venv" "$root/.venv"
fi
echo "setup: done"
