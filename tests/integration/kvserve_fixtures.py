"""Helpers for the Python integration tests of the `kvserve` daemon.

Everything here talks to the real binaries from the CMake build directory
($KVSERVE_BUILD_DIR): `$KVSERVE_BUILD_DIR/server/kvserve` (the daemon) and
`$KVSERVE_BUILD_DIR/server/kvserve-generate` (the reference generator).

conftest.py generates the Python gRPC stubs from proto/kvserve/v1/kvserve.proto
(`generate_stubs`) before the test modules are imported, so a test module can
`from kvserve.v1 import kvserve_pb2` at its top.

The daemon is started with stdout and stderr redirected to files (never a pipe
nobody drains); the ready line is found by polling the stdout file.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import grpc
import pytest

# ---------------------------------------------------------------------------
# Paths.

SOURCE_DIR = Path(os.environ.get("KVSERVE_SOURCE_DIR") or Path(__file__).resolve().parents[2])
BUILD_DIR = Path(os.environ.get("KVSERVE_BUILD_DIR") or SOURCE_DIR / "build")
PROTO_DIR = SOURCE_DIR / "proto"
PROTO_FILE = "kvserve/v1/kvserve.proto"

SERVICE = "kvserve.v1.KvServe"
READY_RE = re.compile(r"kvserve ready grpc=(\S+):(\d+) metrics=(\S+):(\d+)")
# The ready line ends with " http=host:port" when --http_port is set.
HTTP_READY_RE = re.compile(r"kvserve ready .* http=(\S+):(\d+)")
READY_TIMEOUT_S = 120.0  # safety net: builtin:tiny is ready in well under a second
STOP_TIMEOUT_S = 30.0

# builtin:tiny: byte-level tokenizer.
TINY_VOCAB = 258
TINY_BOS = 256
TINY_EOS = 257

# Outputs are compared with `==` to kvserve-generate, which runs the CPU engine:
# the daemon runs on the CPU backend unless KVSERVE_TEST_BACKEND says otherwise.
TEST_BACKEND = os.environ.get("KVSERVE_TEST_BACKEND", "cpu")

# No proxy for loopback, whatever the environment says.
GRPC_OPTIONS = [("grpc.enable_http_proxy", 0)]
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def daemon_path() -> Path:
    return BUILD_DIR / "server" / "kvserve"


def generator_path() -> Path:
    return BUILD_DIR / "server" / "kvserve-generate"


def require_binary(path: Path) -> Path:
    """Fails (never skips) the calling test when a binary was not built."""
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"binary not found or not executable: {path} "
            f"(KVSERVE_BUILD_DIR={os.environ.get('KVSERVE_BUILD_DIR')!r}); build it first",
            pytrace=False,
        )
    return path


# ---------------------------------------------------------------------------
# Stubs.

_STUBS_DIR: Path | None = None


def generate_stubs(out_dir: Path) -> None:
    """grpc_tools.protoc kvserve.proto -> out_dir/kvserve/v1/kvserve_pb2{,_grpc}.py."""
    global _STUBS_DIR
    from grpc_tools import protoc  # noqa: PLC0415 (only needed here)
    import grpc_tools

    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"--proto_path={PROTO_DIR}",
        f"--proto_path={well_known}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        PROTO_FILE,
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise RuntimeError(f"grpc_tools.protoc failed ({rc}): {' '.join(args)}")
    if str(out_dir) not in sys.path:
        sys.path.insert(0, str(out_dir))
    _STUBS_DIR = out_dir


def pb():
    """(kvserve_pb2, kvserve_pb2_grpc)."""
    from kvserve.v1 import kvserve_pb2, kvserve_pb2_grpc  # noqa: PLC0415

    return kvserve_pb2, kvserve_pb2_grpc


# ---------------------------------------------------------------------------
# Prometheus text format.

_SAMPLE_RE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:\{(?P<labels>.*)\})?"
    r"\s+(?P<value>\S+)(?:\s+(?P<ts>-?\d+))?\s*$"
)
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value):
            n = value[i + 1]
            out.append({"n": "\n", "\\": "\\", '"': '"'}.get(n, "\\" + n))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _parse_value(text: str) -> float:
    low = text.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    return float(text)


MetricKey = tuple  # (name, frozenset({(label, value), ...}))


def parse_metrics(text: str) -> dict[MetricKey, float]:
    """Prometheus text exposition -> {(name, frozenset(labels.items())): value}."""
    samples: dict[MetricKey, float] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            raise ValueError(f"metrics line {lineno} unparsable: {raw!r}")
        labels = {}
        body = m.group("labels")
        if body:
            pos = 0
            while pos < len(body):
                lm = _LABEL_RE.match(body, pos)
                if not lm:
                    raise ValueError(f"metrics line {lineno}: bad labels {body!r}")
                labels[lm.group(1)] = _unescape(lm.group(2))
                pos = lm.end()
        key = (m.group("name"), frozenset(labels.items()))
        if key in samples:
            raise ValueError(f"metrics line {lineno}: duplicate sample {key}")
        samples[key] = _parse_value(m.group("value"))
    return samples


def metric(samples: dict, name: str, default: float | None = None, **labels) -> float | None:
    """The value of the sample `name` whose labels are exactly `labels`."""
    return samples.get((name, frozenset(labels.items())), default)


def metric_sum(samples: dict, name: str, **labels) -> float:
    """Sum over all samples of `name` whose labels include `labels` (0 if none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def metric_series(samples: dict, name: str) -> dict[frozenset, float]:
    return {ls: v for (n, ls), v in samples.items() if n == name}


def histogram_count(samples: dict, name: str, **labels) -> float:
    return metric_sum(samples, name + "_count", **labels)


def histogram_sum(samples: dict, name: str, **labels) -> float:
    return metric_sum(samples, name + "_sum", **labels)


# ---------------------------------------------------------------------------
# The daemon.


@dataclass
class Daemon:
    process: subprocess.Popen
    grpc_address: str
    metrics_url: str
    stdout_path: Path
    stderr_path: Path
    args: list[str]
    http_url: str | None = None  # "http://host:port" of the OpenAI API (--http_port)
    _channels: list = field(default_factory=list)

    # -- gRPC ---------------------------------------------------------------
    def channel(self) -> grpc.Channel:
        ch = grpc.insecure_channel(self.grpc_address, options=GRPC_OPTIONS)
        self._channels.append(ch)
        return ch

    def secure_channel(self, credentials: grpc.ChannelCredentials, options=()) -> grpc.Channel:
        ch = grpc.secure_channel(
            self.grpc_address, credentials, options=GRPC_OPTIONS + list(options)
        )
        self._channels.append(ch)
        return ch

    @functools.cached_property
    def stub(self):
        _, pb2_grpc = pb()
        return pb2_grpc.KvServeStub(self.channel())

    def model_info(self, metadata=None):
        pb2, _ = pb()
        return self.stub.GetModelInfo(pb2.GetModelInfoRequest(), timeout=30, metadata=metadata)

    # -- metrics ------------------------------------------------------------
    @property
    def metrics_address(self) -> str:
        """host:port of the /metrics endpoint (a Prometheus scrape target)."""
        return self.metrics_url.split("//", 1)[1].split("/", 1)[0]

    def metrics_text(self, timeout: float = 10.0) -> str:
        with _HTTP.open(self.metrics_url, timeout=timeout) as resp:
            assert resp.status == 200, f"GET {self.metrics_url}: HTTP {resp.status}"
            return resp.read().decode("utf-8")

    def metrics(self) -> dict:
        return parse_metrics(self.metrics_text())

    def wait_metrics(self, predicate: Callable[[dict], bool], timeout: float = 5.0,
                     what: str = "metrics condition") -> dict:
        """Scrapes until predicate(samples) holds; returns the last scrape either way."""
        deadline = time.monotonic() + timeout
        while True:
            samples = self.metrics()
            if predicate(samples) or time.monotonic() >= deadline:
                return samples
            time.sleep(0.05)

    # -- process ------------------------------------------------------------
    def stderr_text(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stdout_text(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def signal(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def close_channels(self) -> None:
        for ch in self._channels:
            ch.close()
        self._channels.clear()
        self.__dict__.pop("stub", None)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait (SIGKILL after `timeout`); returns the exit code."""
        self.close_channels()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode

    def describe(self) -> str:
        tail = self.stderr_text()[-4000:]
        return f"kvserve {' '.join(self.args)}\n--- stderr (tail) ---\n{tail}"


def start_daemon(tmp_dir: Path, *flags: str, model: str = "builtin:tiny",
                 env: dict | None = None, ready_timeout: float = READY_TIMEOUT_S) -> Daemon:
    """Starts $KVSERVE_BUILD_DIR/server/kvserve on loopback ephemeral ports.

    `flags` are extra absl flags; --model defaults to builtin:tiny and --backend
    to $KVSERVE_TEST_BACKEND (cpu) unless given. The loopback ephemeral ports
    come last, so they win over any --host/--port in `flags` (absl: the last
    value of a flag counts).
    Fails the test when the binary is missing or the daemon does not get ready.
    """
    binary = require_binary(daemon_path())
    tmp_dir = Path(tmp_dir)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    n = len(list(tmp_dir.glob("kvserve-*.stderr")))
    stdout_path = tmp_dir / f"kvserve-{n}.stdout"
    stderr_path = tmp_dir / f"kvserve-{n}.stderr"
    args = []
    if not any(f.startswith("--model=") for f in flags):
        args.append(f"--model={model}")
    if not any(f.startswith("--backend=") for f in flags):
        args.append(f"--backend={TEST_BACKEND}")
    args += list(flags)
    args += ["--host=127.0.0.1", "--port=0", "--metrics_host=127.0.0.1", "--metrics_port=0"]
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen([str(binary), *args], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + ready_timeout
    while True:
        m = READY_RE.search(stdout_path.read_text(errors="replace"))
        if m:
            break
        if proc.poll() is not None:
            pytest.fail(
                f"kvserve exited with {proc.returncode} before the ready line\n"
                f"args: {args}\n--- stdout ---\n{stdout_path.read_text(errors='replace')}\n"
                f"--- stderr ---\n{stderr_path.read_text(errors='replace')[-4000:]}",
                pytrace=False,
            )
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait(10)
            pytest.fail(
                f"kvserve not ready after {ready_timeout}s\nargs: {args}\n"
                f"--- stderr ---\n{stderr_path.read_text(errors='replace')[-4000:]}",
                pytrace=False,
            )
        time.sleep(0.02)
    grpc_host, grpc_port, metrics_host, metrics_port = m.groups()
    assert int(grpc_port) > 0 and int(metrics_port) > 0, m.group(0)
    http = HTTP_READY_RE.search(m.string)
    return Daemon(
        http_url=f"http://{http.group(1)}:{http.group(2)}" if http else None,
        process=proc,
        grpc_address=f"{grpc_host}:{grpc_port}",
        metrics_url=f"http://{metrics_host}:{metrics_port}/metrics",
        stdout_path=stdout_path,
        stderr_path=stderr_path,
        args=args,
    )


class DaemonFactory:
    """Starts daemons; stops every one it started on close()."""

    def __init__(self, tmp_dir: Path):
        self.tmp_dir = Path(tmp_dir)
        self.daemons: list[Daemon] = []

    def __call__(self, *flags: str, **kwargs) -> Daemon:
        d = start_daemon(self.tmp_dir, *flags, **kwargs)
        self.daemons.append(d)
        return d

    def close(self) -> None:
        for d in self.daemons:
            d.stop()


# ---------------------------------------------------------------------------
# Reference generator.


@functools.lru_cache(maxsize=None)
def _reference(model: str, prompt: str, max_tokens: int, ignore_eos: bool,
               extra: tuple) -> dict:
    binary = require_binary(generator_path())
    cmd = [str(binary), f"--model={model}", f"--prompt={prompt}",
           f"--max_tokens={max_tokens}", "--json", *extra]
    if not any(e.startswith("--temperature=") for e in extra):
        cmd.append("--temperature=0")
    if ignore_eos:
        cmd.append("--ignore_eos")
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"{cmd} exited {res.returncode}: {res.stderr}"
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"{cmd}: no JSON line in stdout {res.stdout!r}"
    return json.loads(lines[-1])


def reference_generate(prompt: str, max_tokens: int, *, ignore_eos: bool = False,
                       model: str = "builtin:tiny", extra: Iterable[str] = ()) -> dict:
    """kvserve-generate --json: {"prompt_token_ids", "token_ids", "text"}."""
    return _reference(model, prompt, max_tokens, ignore_eos, tuple(extra))


# ---------------------------------------------------------------------------
# Requests.


def _request(prompt_fields: dict, max_tokens: int, ignore_eos: bool,
             temperature: float | None, fields: dict):
    pb2, _ = pb()
    req = pb2.GenerateRequest(**prompt_fields, **fields)
    if temperature is not None:
        req.sampling.temperature = temperature
    req.stopping.max_tokens = max_tokens
    if ignore_eos:
        req.stopping.ignore_eos = True
    return req


def text_request(prompt: str, max_tokens: int, *, ignore_eos: bool = False,
                 temperature: float | None = 0.0, **fields):
    return _request({"text": prompt}, max_tokens, ignore_eos, temperature, fields)


def ids_request(ids: list[int], max_tokens: int, *, ignore_eos: bool = False,
                temperature: float | None = 0.0, **fields):
    pb2, _ = pb()
    return _request({"token_ids": pb2.TokenIds(ids=ids)}, max_tokens, ignore_eos, temperature,
                    fields)


@dataclass
class StreamResult:
    responses: list = field(default_factory=list)
    code: grpc.StatusCode = grpc.StatusCode.OK
    details: str = ""
    error: Exception | None = None

    @property
    def token_ids(self) -> list[int]:
        return [t for r in self.responses for t in r.token_ids]

    @property
    def text(self) -> str:
        return "".join(r.text for r in self.responses)

    @property
    def logprobs(self) -> list:
        return [lp for r in self.responses for lp in r.logprobs]

    @property
    def final(self):
        """The final message (`finished` set), or None."""
        finals = [r for r in self.responses if r.finished]
        return finals[-1] if finals else None

    def check_ok(self) -> "StreamResult":
        assert self.code == grpc.StatusCode.OK, f"status {self.code}: {self.details!r}"
        finals = [i for i, r in enumerate(self.responses) if r.finished]
        assert finals == [len(self.responses) - 1], (
            f"expected exactly one final message, the last one; finished at {finals} "
            f"of {len(self.responses)} messages")
        return self

    def __repr__(self) -> str:
        final = self.final
        return (f"StreamResult(code={self.code}, details={self.details!r}, "
                f"messages={len(self.responses)}, tokens={len(self.token_ids)}, "
                f"final={'None' if final is None else str(final).replace(chr(10), ' ')})")


def stream(stub, request, *, timeout: float | None = 120.0, metadata=None,
           on_message: Callable | None = None, call_holder: list | None = None) -> StreamResult:
    """Runs one streaming Generate to the end; never raises grpc.RpcError."""
    result = StreamResult()
    call = stub.Generate(request, timeout=timeout, metadata=metadata)
    if call_holder is not None:
        call_holder.append(call)
    try:
        for resp in call:
            result.responses.append(resp)
            if on_message is not None:
                on_message(resp, call)
    except grpc.RpcError as e:
        result.code = e.code()
        result.details = e.details() or ""
        result.error = e
    return result


def unary_error(fn, *args, **kwargs) -> grpc.RpcError | None:
    """Calls a unary RPC; returns its RpcError, or None when it succeeded."""
    try:
        fn(*args, **kwargs)
    except grpc.RpcError as e:
        return e
    return None


def run_concurrently(fns: list[Callable], timeout: float = 180.0) -> list:
    """Runs each fn in its own thread (started together); returns their results in order."""
    results: list = [None] * len(fns)
    errors: list = [None] * len(fns)
    barrier = threading.Barrier(len(fns))

    def runner(i, fn):
        try:
            barrier.wait(30)
            results[i] = fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors[i] = e

    threads = [threading.Thread(target=runner, args=(i, fn), daemon=True)
               for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a concurrent request did not finish in time"
    for e in errors:
        if e is not None:
            raise e
    return results


def openssl_available() -> str:
    path = shutil.which("openssl")
    if path is None:
        pytest.fail("openssl CLI not found (needed to make test certificates)", pytrace=False)
    return path


def _openssl(*args, cwd: Path):
    res = subprocess.run([openssl_available(), *args], cwd=cwd, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, f"openssl {' '.join(args)}:\n{res.stderr}"


def _make_ca(d: Path, name: str):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
             "-subj", f"/CN=kvserve test {name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def _make_leaf(d: Path, name: str, ca: str, ext: str):
    (d / f"{name}.ext").write_text(ext)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=kvserve-{name}",
             cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
             "-extfile", f"{name}.ext", cwd=d)


def make_test_certs(d: Path) -> Path:
    """Test PKI in `d` (returned): ca.pem/.key and other-ca.pem/.key (two CAs);
    server.pem/.key signed by ca for 127.0.0.1 and localhost; client.pem/.key
    signed by ca and rogue-client.pem/.key signed by other-ca (clientAuth)."""
    _make_ca(d, "ca")
    _make_ca(d, "other-ca")
    _make_leaf(d, "server", "ca",
               "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
               "keyUsage=critical,digitalSignature,keyEncipherment\n"
               "extendedKeyUsage=serverAuth\n")
    client_ext = ("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                  "extendedKeyUsage=clientAuth\n")
    _make_leaf(d, "client", "ca", client_ext)
    _make_leaf(d, "rogue-client", "other-ca", client_ext)
    return d
