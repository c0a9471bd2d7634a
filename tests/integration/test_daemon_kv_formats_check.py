"""bench/cuda/daemon_kv_formats_check.py (the GPU run's daemon check) on the
CPU backend: it passes for formats the daemon serves and fails, with a
reason, for one it refuses, so the check a GPU run relies on cannot rot or
pass vacuously."""

from __future__ import annotations

import subprocess
import sys

import kvserve_fixtures as kf

SCRIPT = kf.SOURCE_DIR / "bench" / "cuda" / "daemon_kv_formats_check.py"


def _run(*formats: str) -> subprocess.CompletedProcess:
    binary = kf.require_binary(kf.daemon_path())
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--backend=cpu", str(binary), "builtin:tiny", *formats],
        capture_output=True, text=True, timeout=300)


def test_passes_for_served_formats():
    result = _run("auto", "int8", "fp4_e2m1")
    assert result.returncode == 0, result.stdout + result.stderr
    for fmt in ("auto", "int8", "fp4_e2m1"):
        assert f"builtin:tiny --kv_cache_dtype={fmt}: PASS" in result.stdout
        assert f"{fmt}: 32 tokens" in result.stdout


def test_fails_for_a_format_the_daemon_refuses():
    result = _run("int8", "int3")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "builtin:tiny --kv_cache_dtype=int8: PASS" in result.stdout
    assert "builtin:tiny --kv_cache_dtype=int3: FAIL" in result.stdout
    assert "no ready line" in result.stdout
