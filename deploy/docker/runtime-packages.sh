#!/bin/sh
# Prints the Debian/Ubuntu packages that provide the shared libraries the given
# ELF files load (as ldd resolves them), one per line, sorted: the runtime
# stage of the Dockerfile installs exactly these. Fails when a library is
# missing ("not found") or belongs to no package.
#
#   deploy/docker/runtime-packages.sh build/server/kvserve build/lib/libkvserve_sentencepiece.so
#
# On Debian 12 (bookworm) this prints, for kvserve + kvserve-client +
# libkvserve_sentencepiece.so: libabsl20220623 libc-ares2 libc6 libcivetweb1
# libfmt9 libgcc-s1 libgrpc++1.51 libgrpc29 libpcre2-8-0
# libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprotobuf32 libre2-9
# libsentencepiece0 libspdlog1.10 libssl3 libstdc++6 libutf8proc2 zlib1g.
set -eu

if [ "$#" -eq 0 ]; then
  echo "usage: $0 ELF_FILE..." >&2
  exit 2
fi

libs=$(mktemp)
pkgs=$(mktemp)
owners=$(mktemp)
trap 'rm -f "$libs" "$pkgs" "$owners"' EXIT
for f in "$@"; do
  out=$(ldd "$f") || { echo "runtime-packages: ldd $f failed" >&2; exit 1; }
  if printf '%s\n' "$out" | grep -q 'not found'; then
    echo "runtime-packages: $f: unresolved libraries:" >&2
    printf '%s\n' "$out" | grep 'not found' >&2
    exit 1
  fi
  # "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)"
  printf '%s\n' "$out" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' >> "$libs"
done

# dpkg knows each file under the path its package installed it at; with
# merged /usr, ldd may report /lib/... for a file shipped as /usr/lib/... (or
# the other way round), and the path may be a symlink to the real file. So
# each library is looked up under all of these names, in one dpkg-query call
# (it reads the package database once; names no package owns are skipped).
candidates() {
  real=$(readlink -f "$1")
  printf '%s\n' "$1" "$real" "/usr$1" "${1#/usr}" "/usr$real" "${real#/usr}"
}
# shellcheck disable=SC2013  # library paths hold no spaces
for lib in $(sort -u "$libs"); do
  candidates "$lib"
done | sort -u | xargs dpkg-query -S 2>/dev/null | grep -v '^diversion' > "$owners" || true

# "libfoo1:amd64: /usr/lib/x86_64-linux-gnu/libfoo.so.1" -> libfoo1
# shellcheck disable=SC2013  # library paths hold no spaces
for lib in $(sort -u "$libs"); do
  pkg=$(candidates "$lib" | awk -v owners="$owners" '
    BEGIN { while ((getline line < owners) > 0) {
              i = index(line, ": /"); if (i == 0) continue
              p = substr(line, 1, i - 1); sub(/,.*/, "", p); sub(/:.*/, "", p)
              owner[substr(line, i + 2)] = p } }
    ($0 in owner) { print owner[$0]; exit }')
  if [ -z "$pkg" ]; then
    echo "runtime-packages: no package owns $lib" >&2
    exit 1
  fi
  echo "$pkg" >> "$pkgs"
done
sort -u "$pkgs"
