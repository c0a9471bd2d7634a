#!/usr/bin/env bash
# Fetches xgrammar's pinned PyPI source distribution (the C++ grammar engine
# of structured outputs; third_party/xgrammar/CMakeLists.txt builds it) into
# ~/.cache/kvserve/sdist (KVSERVE_SDIST_CACHE moves it), and checks its sha256.
# Idempotent: nothing is fetched when the file is there with the right hash.
set -euo pipefail
version=0.2.9
sha256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
cache="${KVSERVE_SDIST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvserve/sdist}"
file="$cache/xgrammar-$version.tar.gz"
have() { [ -f "$file" ] && [ "$(sha256sum "$file" | cut -d' ' -f1)" = "$sha256" ]; }
if have; then exit 0; fi
mkdir -p "$cache"
echo "fetch_xgrammar: downloading the xgrammar $version source distribution from PyPI into $cache"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# --no-binary xgrammar: the sdist, not a wheel; pip prepares its metadata in
# an isolated environment (scikit-build-core), which builds nothing.
python3 -m pip download -q --no-deps --no-binary xgrammar "xgrammar==$version" -d "$tmp"
got=$(sha256sum "$tmp/xgrammar-$version.tar.gz" | cut -d' ' -f1)
if [ "$got" != "$sha256" ]; then
  echo "fetch_xgrammar: xgrammar-$version.tar.gz has sha256 $got, expected $sha256" >&2
  exit 1
fi
mv "$tmp/xgrammar-$version.tar.gz" "$file"
