"""Graceful shutdown: SIGTERM/SIGINT drain in-flight requests, then exit 0; a
second signal exits at once with a non-zero code."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import kvserve_fixtures as kf
from kvserve_fixtures import stream, text_request

pb2, pb2_grpc = kf.pb()

# builtin:small (~106M parameters) decodes at tens of tokens/s on 2 cores: its
# long requests are certain to be in flight when the signal arrives.
SLOW_MODEL = "builtin:small"


class Streams:
    """Streaming Generate calls running in background threads."""

    def __init__(self, stub, requests, timeout: float = 300):
        self.results: list[kf.StreamResult | None] = [None] * len(requests)
        self.tokens = [0] * len(requests)
        self.started = [threading.Event() for _ in requests]
        self.threads = []
        for i, req in enumerate(requests):
            def run(i=i, req=req):
                def on_message(resp, call):
                    self.tokens[i] += len(resp.token_ids)
                    if self.tokens[i] > 0:
                        self.started[i].set()
                self.results[i] = stream(stub, req, timeout=timeout, on_message=on_message)
                self.started[i].set()
            t = threading.Thread(target=run, daemon=True)
            t.start()
            self.threads.append(t)

    def wait_started(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for ev in self.started:
            assert ev.wait(max(0.0, deadline - time.monotonic())), "a stream never started"

    def running(self) -> int:
        return sum(1 for r in self.results if r is None)

    def join(self, timeout: float) -> list[kf.StreamResult]:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert all(not t.is_alive() for t in self.threads), \
            f"streams still open after {timeout}s: {self.tokens}"
        return self.results


def wait_unavailable(d: kf.Daemon, timeout: float = 10) -> list:
    """New Generate calls until one gets UNAVAILABLE (the signal is async)."""
    stub = pb2_grpc.KvServeStub(d.channel())
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = stream(stub, text_request("Too late", 2), timeout=5)
        seen.append(res.code)
        if res.code == grpc.StatusCode.UNAVAILABLE:
            assert res.responses == [], res
            return seen
        assert res.code == grpc.StatusCode.OK, f"new Generate while draining: {res}"
        time.sleep(0.01)
    pytest.fail(f"no UNAVAILABLE within {timeout}s after SIGTERM: {seen}")


def wait_not_serving(d: kf.Daemon, timeout: float = 10) -> str:
    """Health turns NOT_SERVING (or the port is closed once the daemon exited)."""
    health = health_pb2_grpc.HealthStub(d.channel())
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            for service in ("", kf.SERVICE):
                last = health.Check(health_pb2.HealthCheckRequest(service=service),
                                    timeout=5).status
                if last != health_pb2.HealthCheckResponse.NOT_SERVING:
                    break
            else:
                return "NOT_SERVING"
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAVAILABLE and d.process.poll() is not None:
                return "exited"
            last = e.code()
        time.sleep(0.01)
    pytest.fail(f"health still {last} {timeout}s after SIGTERM")


def long_requests(info, prompts, cap=None):
    out = []
    for p in prompts:
        n = info.max_model_len - (len(p) + 1)
        if cap is not None:
            n = min(n, cap)
        out.append((text_request(p, n, ignore_eos=True), n))
    return out


def test_sigterm_drains_in_flight_requests(kvserve_factory):
    d = kvserve_factory()
    info = d.model_info()
    reqs = long_requests(info, [f"Drain me {i}" for i in range(6)])
    streams = Streams(d.stub, [r for r, _ in reqs])
    streams.wait_started()
    in_flight_at_signal = streams.running()
    d.signal(signal.SIGTERM)
    seen = wait_unavailable(d)
    health = wait_not_serving(d)
    results = streams.join(120)
    for res, (_, n) in zip(results, reqs):
        res.check_ok()
        assert res.final.finish_reason == pb2.FINISH_REASON_LENGTH, res
        assert len(res.token_ids) == n, res
        assert res.final.usage.completion_tokens == n, res
    rc = d.process.wait(kf.STOP_TIMEOUT_S)
    assert rc == 0, f"exit code {rc}\n{d.describe()}"
    print(f"in flight at SIGTERM: {in_flight_at_signal}/6; probes {seen}; health {health}")


def test_sigint_idle_exits_zero(kvserve_factory):
    d = kvserve_factory()
    stream(d.stub, text_request("Hello", 4)).check_ok()
    d.signal(signal.SIGINT)
    rc = d.process.wait(kf.STOP_TIMEOUT_S)
    assert rc == 0, f"exit code {rc}\n{d.describe()}"


def test_drain_timeout_bounds_shutdown(kvserve_factory):
    d = kvserve_factory("--drain_timeout_s=1", model=SLOW_MODEL)
    info = d.model_info()
    reqs = long_requests(info, [f"Never finishes {i}" for i in range(3)])
    streams = Streams(d.stub, [r for r, _ in reqs])
    streams.wait_started(120)
    assert streams.running() == 3
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    try:
        rc = d.process.wait(1 + 20)  # safety net: expected about 1 s
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running 21 s after SIGTERM with --drain_timeout_s=1\n{d.describe()}")
    elapsed = time.monotonic() - t0
    assert rc == 0, f"exit code {rc}\n{d.describe()}"
    results = streams.join(30)
    for res, (_, n) in zip(results, reqs):
        assert res is not None
        if res.code == grpc.StatusCode.OK and res.final is not None:
            assert res.final.finish_reason in (pb2.FINISH_REASON_ABORTED,
                                               pb2.FINISH_REASON_LENGTH), res
    print(f"exited {elapsed:.2f}s after SIGTERM; streams: {results}")


def test_second_signal_exits_at_once(kvserve_factory):
    d = kvserve_factory(model=SLOW_MODEL)  # default --drain_timeout_s=30
    info = d.model_info()
    reqs = long_requests(info, [f"Interrupted {i}" for i in range(2)])
    streams = Streams(d.stub, [r for r, _ in reqs])
    streams.wait_started(120)
    assert streams.running() == 2
    d.signal(signal.SIGTERM)
    wait_not_serving(d)
    assert d.process.poll() is None, "exited before the second signal"
    assert streams.running() == 2, "the long requests should still be draining"
    # While draining: new requests are refused and counted; /metrics still answers.
    seen = wait_unavailable(d)
    samples = d.wait_metrics(
        lambda s: kf.metric(s, "kvserve_requests_rejected_total", 0, reason="unavailable")
        >= seen.count(grpc.StatusCode.UNAVAILABLE))
    assert kf.metric(samples, "kvserve_requests_rejected_total", 0, reason="unavailable") == \
        seen.count(grpc.StatusCode.UNAVAILABLE), (
            seen, kf.metric_series(samples, "kvserve_requests_rejected_total"))
    assert kf.metric(samples, "kvserve_num_requests_running") == 2
    assert streams.running() == 2
    d.signal(signal.SIGTERM)
    try:
        rc = d.process.wait(10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running 10 s after the second SIGTERM\n{d.describe()}")
    assert rc != 0, f"second signal must exit non-zero, got {rc}\n{d.describe()}"
    streams.join(30)
