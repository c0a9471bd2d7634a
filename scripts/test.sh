#!/usr/bin/env bash
# Sets up a fresh machine, builds kvserve and runs the whole test suite
# (C++ unit tests, the fuzz corpora, the Hugging Face oracle tests, the
# integration tests that run the real daemon, and the deployment checks)
# through CTest, then the sanitizer builds and the bounded fuzzing runs
# (scripts/test_sanitizers.sh; KVSERVE_SANITIZERS=0 skips them).
# Exits non-zero when any test fails or any sanitizer reports.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "${KVSERVE_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "${KVSERVE_JOBS:-$(nproc)}" --timeout 1500
if [ "${KVSERVE_SANITIZERS:-1}" != "0" ]; then
  "$root/scripts/test_sanitizers.sh"
fi
