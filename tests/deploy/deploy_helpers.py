"""Helpers for the deployment checks in tests/deploy/.

ctest runs each tests/deploy/test_*.py as
  .venv/bin/python -m pytest -q -p no:cacheprovider FILE
with KVSERVE_BUILD_DIR (the CMake build dir) and KVSERVE_SOURCE_DIR (the
repository root). Missing tools (promtool, prometheus, kubectl) and a missing
daemon binary fail the tests; nothing here skips.

Tools are found on PATH; KVSERVE_PROMTOOL, KVSERVE_PROMETHEUS and
KVSERVE_KUBECTL name another binary (e.g. an unpacked Debian
kubernetes-client's kubectl, to check the manifests against its old
embedded kustomize).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from functools import lru_cache
from pathlib import Path

import pytest

import kvserve_fixtures as fixtures  # tests/integration (see conftest.py)

SOURCE_DIR = Path(os.environ.get("KVSERVE_SOURCE_DIR") or Path(__file__).resolve().parents[2])
BUILD_DIR = Path(os.environ.get("KVSERVE_BUILD_DIR") or SOURCE_DIR / "build")
DEPLOY_DIR = SOURCE_DIR / "deploy"
PROMETHEUS_DIR = DEPLOY_DIR / "prometheus"
DASHBOARD = DEPLOY_DIR / "grafana" / "dashboards" / "kvserve.json"
K8S_DIR = DEPLOY_DIR / "k8s"
DOCKERFILE = SOURCE_DIR / "Dockerfile"
COMPOSE = DEPLOY_DIR / "compose" / "compose.yaml"

METRIC_NAME_RE = re.compile(r"\bkvserve_[a-zA-Z0-9_:]*")
# Loopback only, whatever proxy the environment names.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))
GRPC_OPTIONS = [("grpc.enable_http_proxy", 0)]

# ---------------------------------------------------------------------------
# Tools and binaries.


def require_tool(name: str, env_var: str) -> str:
    """The path of a tool (env override, else PATH); fails the test if absent."""
    path = os.environ.get(env_var) or shutil.which(name)
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"{name} not found (PATH or ${env_var}); install it "
                    f"(see scripts/setup.sh and deploy/README.md)", pytrace=False)
    return path


def daemon_path() -> Path:
    return fixtures.require_binary(fixtures.daemon_path())


def run(cmd: list[str], *, timeout: float = 60, cwd: Path | None = None,
        check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                         stdin=subprocess.DEVNULL)
    if check and res.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {res.returncode}\n"
                    f"--- stdout ---\n{res.stdout[-4000:]}\n--- stderr ---\n{res.stderr[-4000:]}",
                    pytrace=False)
    return res


@lru_cache(maxsize=None)
def daemon_flags() -> frozenset[str]:
    """The flag names `kvserve --help` documents (server/flags.cc)."""
    res = run([str(daemon_path()), "--help"], check=False, timeout=60)
    flags = frozenset(re.findall(r"^\s+--([A-Za-z0-9_]+) \(", res.stdout + res.stderr, re.M))
    assert {"host", "port", "metrics_port", "model", "drain_timeout_s"} <= flags, (
        f"could not parse `kvserve --help`:\n{res.stdout[-3000:]}")
    return flags


def flag_values(args: list[str]) -> dict[str, str]:
    """--name=value arguments as a dict; a later flag wins, as in absl."""
    out: dict[str, str] = {}
    for a in args:
        if a.startswith("--"):
            name, _, value = a[2:].partition("=")
            out[name] = value
    return out


def unknown_flags(args: list[str]) -> list[str]:
    known = daemon_flags()
    return [a for a in args if a.startswith("--") and a[2:].partition("=")[0] not in known]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# The daemon: the integration tests' harness (tests/integration/kvserve_fixtures.py).


@contextlib.contextmanager
def running_daemon(tmp_dir: Path, *flags: str):
    d = fixtures.start_daemon(tmp_dir, *flags)
    try:
        yield d
    finally:
        rc = d.stop()
        assert rc == 0, f"kvserve exited {rc} after SIGTERM\n{d.describe()}"


def generate(stubs_dir: Path, address: str, prompt: str = "Hello, kvserve!",
             max_tokens: int = 8) -> list[int]:
    """One streaming Generate (greedy, ignore_eos); returns the output token ids."""
    import grpc

    fixtures.generate_stubs(stubs_dir)
    pb2, pb2_grpc = fixtures.pb()
    req = pb2.GenerateRequest(text=prompt)
    req.sampling.temperature = 0.0
    req.stopping.max_tokens = max_tokens
    req.stopping.ignore_eos = True
    with grpc.insecure_channel(address, options=GRPC_OPTIONS) as channel:
        stub = pb2_grpc.KvServeStub(channel)
        responses = list(stub.Generate(req, timeout=60))
    ids = [t for r in responses for t in r.token_ids]
    assert responses and responses[-1].finished, f"no final message: {responses}"
    assert len(ids) == max_tokens, f"expected {max_tokens} tokens, got {ids}"
    return ids


# ---------------------------------------------------------------------------
# Prometheus text exposition.


def exposition_families(text: str) -> tuple[dict[str, str], set[str]]:
    """({family: type} from the # TYPE lines, {sample names})."""
    types: dict[str, str] = {}
    samples: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            types[name] = kind.strip()
        elif line and not line.startswith("#"):
            samples.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    return types, samples


def family_of(sample_name: str, types: dict[str, str]) -> str | None:
    """The family a sample name belongs to: itself (counter, gauge, ...), or
    a histogram/summary whose _bucket/_sum/_count sample it is."""
    if sample_name in types and types[sample_name] not in ("histogram", "summary"):
        return sample_name
    for suffix, kinds in (("_bucket", ("histogram",)), ("_sum", ("histogram", "summary")),
                          ("_count", ("histogram", "summary"))):
        if sample_name.endswith(suffix):
            base = sample_name[: -len(suffix)]
            if types.get(base) in kinds:
                return base
    return None


# ---------------------------------------------------------------------------
# PromQL found in the deploy files.


def load_yaml(path: Path):
    import yaml

    with open(path) as f:
        return yaml.safe_load(f)


def load_yaml_all(text: str) -> list:
    import yaml

    return [d for d in yaml.safe_load_all(text) if d]


def dashboard() -> dict:
    with open(DASHBOARD) as f:
        return json.load(f)


def dashboard_exprs() -> list[tuple[str, str]]:
    """(panel title, expr) of every panel target (rows' nested panels too)."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels", []))

    walk(dashboard()["panels"])
    return out


def dashboard_variable_queries() -> list[str]:
    out = []
    for v in dashboard().get("templating", {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if v.get("type") == "query" and q:
            out.append(q)
    return out


def alert_rules() -> list[dict]:
    return [r for g in load_yaml(PROMETHEUS_DIR / "alerts.yml")["groups"] for r in g["rules"]]


def metric_names(expr: str) -> set[str]:
    return set(METRIC_NAME_RE.findall(expr))


def grafana_to_promql(expr: str, rate_interval: str = "1m") -> str:
    """A dashboard expr with Grafana's variables filled in."""
    return (expr.replace("$__rate_interval", rate_interval)
            .replace("$__interval", rate_interval)
            .replace("$job", ".*").replace("$instance", ".*"))


# ---------------------------------------------------------------------------
# Prometheus HTTP API.


def prom_get(base_url: str, path: str, **params) -> dict:
    url = f"{base_url}{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params, doseq=True)
    with HTTP.open(url, timeout=10) as resp:
        return json.loads(resp.read().decode())


# ---------------------------------------------------------------------------
# Kubernetes manifests.


@lru_cache(maxsize=None)
def render_overlay(overlay: str) -> tuple:
    kubectl = require_tool("kubectl", "KVSERVE_KUBECTL")
    res = run([kubectl, "kustomize", str(K8S_DIR / "overlays" / overlay)], timeout=60)
    return tuple(load_yaml_all(res.stdout))


def find(docs, kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind
            and (name is None or d["metadata"]["name"] == name)]


def the(docs, kind: str, name: str | None = None) -> dict:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
