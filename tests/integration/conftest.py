"""pytest fixtures for the kvserve daemon integration tests.

ctest runs each tests/integration/test_*.py as
  .venv/bin/python -m pytest -q -p no:cacheprovider FILE
with KVSERVE_BUILD_DIR (the CMake build dir) and KVSERVE_SOURCE_DIR (repo root).

- The Python stubs for proto/kvserve/v1/kvserve.proto are generated with
  grpc_tools.protoc into a session temporary directory (put on sys.path) before
  the test modules are imported: `from kvserve.v1 import kvserve_pb2` works.
- `kvserve_factory(*flags, model=...)` starts `$KVSERVE_BUILD_DIR/server/kvserve`
  on 127.0.0.1 with ephemeral gRPC and metrics ports, waits for its ready line
  and returns a `kvserve_fixtures.Daemon` (grpc_address, metrics_url, process,
  stderr_path, stub, metrics(), ...); --backend=cpu unless the test passes
  --backend or KVSERVE_TEST_BACKEND names another. Every daemon it started gets SIGTERM at
  teardown (SIGKILL after 30 s).
- `kvserve_module_factory`: the same, shared by one test module.
- `kvserve_daemon`: one default builtin:tiny daemon shared by one test module.
A missing binary fails the test (it never skips).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kvserve_fixtures as kf  # noqa: E402

_STUBS_TMP: str | None = None


def pytest_configure(config):
    global _STUBS_TMP
    if _STUBS_TMP is None:
        _STUBS_TMP = tempfile.mkdtemp(prefix="kvserve-pystubs-")
        kf.generate_stubs(Path(_STUBS_TMP))


def pytest_unconfigure(config):
    global _STUBS_TMP
    if _STUBS_TMP is not None:
        shutil.rmtree(_STUBS_TMP, ignore_errors=True)
        _STUBS_TMP = None


@pytest.fixture(scope="session")
def pb2():
    return kf.pb()[0]


@pytest.fixture(scope="session")
def pb2_grpc():
    return kf.pb()[1]


@pytest.fixture
def kvserve_factory(tmp_path):
    factory = kf.DaemonFactory(tmp_path)
    yield factory
    factory.close()


@pytest.fixture(scope="module")
def kvserve_module_factory(tmp_path_factory):
    factory = kf.DaemonFactory(tmp_path_factory.mktemp("kvserve"))
    yield factory
    factory.close()


@pytest.fixture(scope="module")
def kvserve_daemon(kvserve_module_factory):
    """A default builtin:tiny daemon shared by the tests of one module."""
    return kvserve_module_factory()


@pytest.fixture(scope="module")
def model_info(kvserve_daemon):
    return kvserve_daemon.model_info()
