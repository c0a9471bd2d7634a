"""`--help` of every program, built from a checkout at an unusual absolute path.

The repository's tracked files are copied to <tmp>/srv/src/kvserve-unusual-checkout
and built there with the build directory outside the source tree (so the
compiler sees absolute source paths), CPU backend only, unoptimised, just
the four programs. Each one's --help must exit 0, list its own flags under the
repository-relative file that defines them, and show no part of the path it
was built at. A bad flag still fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import kvserve_fixtures as kf

CHECKOUT_NAME = "kvserve-unusual-checkout"
PROGRAMS = {
    # binary (relative to the build dir): (its flag file, flags it must list)
    "server/kvserve": ("server/flags.cc", ["--model", "--port", "--generation_config"]),
    "server/kvserve-generate": ("server/generate_main.cc", ["--prompt", "--max_tokens"]),
    "tools/loadgen/kvserve-loadgen": ("tools/loadgen/loadgen_main.cc",
                                      ["--address", "--concurrency"]),
    "tools/kvserve-client": ("tools/kvserve_client_main.cc", ["--address", "--max_tokens"]),
}


def repository_files(source: Path) -> list[str]:
    res = subprocess.run(["git", "-C", str(source), "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, check=True)
    return [f for f in res.stdout.decode().split("\0") if f]


@pytest.fixture(scope="module")
def unusual_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("unusual")
    source = root / "srv" / "src" / CHECKOUT_NAME
    for rel in repository_files(kf.SOURCE_DIR):
        src = kf.SOURCE_DIR / rel
        if src.is_file():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, source / rel)
    build = root / "elsewhere-build"
    env = {**os.environ, "CMAKE_CXX_COMPILER_LAUNCHER": "", "CMAKE_C_COMPILER_LAUNCHER": ""}
    # Unoptimised (-O0): what --help prints and the paths the compiler sees do
    # not depend on the optimiser, and the build takes two thirds of a Release
    # one's time (137 s against 205 s on 2 cores).
    configure = subprocess.run(
        ["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", "-DKVSERVE_CUDA=OFF",
         "-DCMAKE_BUILD_TYPE=Debug", "-DCMAKE_CXX_FLAGS_DEBUG=-O0", "-DCMAKE_C_FLAGS_DEBUG=-O0"],
        capture_output=True, text=True, env=env)
    assert configure.returncode == 0, configure.stderr[-4000:]
    targets = [Path(p).name for p in PROGRAMS]
    jobs = os.environ.get("KVSERVE_JOBS", str(os.cpu_count() or 2))
    built = subprocess.run(["cmake", "--build", str(build), "-j", jobs, "--target", *targets],
                           capture_output=True, text=True, env=env, timeout=1800)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    return source, build


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_help_lists_own_flags_without_the_build_path(unusual_build, program):
    source, build = unusual_build
    flag_file, flags = PROGRAMS[program]
    res = subprocess.run([str(build / program), "--help"], capture_output=True, text=True,
                         timeout=30)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"exit {res.returncode}\n{out}"
    assert "No flags matched" not in out, out
    assert f"Flags from {flag_file}:" in out, out
    for flag in flags:
        assert flag in out, f"{flag} missing from --help\n{out}"
    for fragment in ("srv/src", CHECKOUT_NAME, str(build), str(source)):
        assert fragment not in out, f"{fragment!r} in --help\n{out}"


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_helpfull_shows_no_build_path_and_bad_flags_fail(unusual_build, program):
    source, build = unusual_build
    full = subprocess.run([str(build / program), "--helpfull"], capture_output=True, text=True,
                          timeout=30)
    assert full.returncode == 0
    assert CHECKOUT_NAME not in full.stdout + full.stderr
    bad = subprocess.run([str(build / program), "--no_such_flag=1"], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode != 0
    assert "no_such_flag" in bad.stderr
