"""`--help` of every program, as the suite's own build made it.

Each one's --help must exit 0, list its own flags under the repository-relative
file that defines them, and show no part of the paths it was built at (the
compiler sees absolute source paths: CMake passes them, and the build strips
the checkout's prefix with -fmacro-prefix-map). A bad flag still fails.

The checkout's path is whatever the developer or CI chose, so this is checked at
a path the code knows nothing of; common::RepositoryRelativePath's handling of
odd paths (a checkout inside a folder named like a top-level one, relative and
already-stripped paths) is unit-tested in tests/unit/common/cli_help_test.cc.
Until 2026-11-29 this test copied the checkout to an unusual path and built
the four programs there, two minutes of the Release suite's two cores.
"""

from __future__ import annotations

import subprocess

import pytest

import kvserve_fixtures as kf

PROGRAMS = {
    # binary (relative to the build dir): (its flag file, flags it must list)
    "server/kvserve": ("server/flags.cc", ["--model", "--port", "--generation_config",
                                            "--served_model_name"]),
    "server/kvserve-generate": ("server/generate_main.cc", ["--prompt", "--max_tokens"]),
    "tools/loadgen/kvserve-loadgen": ("tools/loadgen/loadgen_main.cc",
                                      ["--address", "--concurrency"]),
    "tools/kvserve-client": ("tools/kvserve_client_main.cc", ["--address", "--max_tokens"]),
}


def build_paths() -> list[str]:
    """The absolute paths the programs were compiled at, none of which --help may show."""
    return [str(kf.SOURCE_DIR.resolve()), str(kf.BUILD_DIR.resolve())]


@pytest.fixture(scope="module")
def built():
    for program in PROGRAMS:
        if not (kf.BUILD_DIR / program).exists():
            pytest.fail(f"{kf.BUILD_DIR / program} is not built (KVSERVE_BUILD_DIR="
                        f"{kf.BUILD_DIR}); build the whole project first")
    return kf.BUILD_DIR


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_help_lists_own_flags_without_the_build_path(built, program):
    build = built
    flag_file, flags = PROGRAMS[program]
    res = subprocess.run([str(build / program), "--help"], capture_output=True, text=True,
                         timeout=30)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"exit {res.returncode}\n{out}"
    assert "No flags matched" not in out, out
    assert f"Flags from {flag_file}:" in out, out
    for flag in flags:
        assert flag in out, f"{flag} missing from --help\n{out}"
    for fragment in build_paths():
        assert fragment not in out, f"{fragment!r} in --help\n{out}"


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_helpfull_shows_no_build_path_and_bad_flags_fail(built, program):
    build = built
    full = subprocess.run([str(build / program), "--helpfull"], capture_output=True, text=True,
                          timeout=30)
    assert full.returncode == 0
    for fragment in build_paths():
        assert fragment not in full.stdout + full.stderr, f"{fragment!r} in --helpfull"
    bad = subprocess.run([str(build / program), "--no_such_flag=1"], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode != 0
    assert "no_such_flag" in bad.stderr
