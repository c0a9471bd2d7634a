"""kvserve-loadgen against the real daemon (builtin:tiny on loopback).

- Its report agrees with what the server counted (/metrics deltas) and with
  the workload asked for (ignore_eos: exactly num_requests * output_len tokens).
- The JSON result has every field docs/loadgen.md documents; the CSV has one
  row per request.
- A shared-prefix workload reports a prefix-cache hit ratio > 0.
- A rate sweep gives one phase per rate, and tools/loadgen/plot.py draws it.
- SIGKILL of the server mid-run: loadgen ends within a bounded time with exit
  status 1 and the failed requests counted by status code (UNAVAILABLE).
"""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kvserve_fixtures as kf

LOADGEN_TIMEOUT_S = 60


def loadgen_path() -> Path:
    return kf.BUILD_DIR / "tools" / "loadgen" / "kvserve-loadgen"


def run_loadgen(daemon: kf.Daemon, tmp_path: Path, *flags: str, name: str = "run",
                timeout: float = LOADGEN_TIMEOUT_S) -> tuple[subprocess.CompletedProcess, dict, Path]:
    binary = kf.require_binary(loadgen_path())
    json_path = tmp_path / f"{name}.json"
    csv_path = tmp_path / f"{name}.csv"
    cmd = [str(binary), f"--address={daemon.grpc_address}", f"--metrics_url={daemon.metrics_url}",
           f"--output_json={json_path}", f"--output_csv={csv_path}", *flags]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert json_path.exists(), f"{cmd}: no JSON (exit {res.returncode})\n{res.stdout}\n{res.stderr}"
    return res, json.loads(json_path.read_text()), csv_path


# Every field docs/loadgen.md documents.
TOP_FIELDS = ["tool", "start_time_unix", "exit_code", "config", "model", "num_phases", "phases"]
MODEL_FIELDS = ["model_name", "architecture", "max_model_len", "vocab_size", "block_size",
                "num_kv_blocks", "backend", "version", "max_num_seqs", "max_num_batched_tokens",
                "eos_token_ids"]
PHASE_FIELDS = ["phase", "request_rate", "concurrency", "num_requests", "num_sent", "num_completed",
                "num_failed", "num_not_sent", "num_cancelled_by_limit", "duration_s",
                "total_prompt_tokens", "total_cached_prompt_tokens", "total_output_tokens",
                "request_throughput", "output_token_throughput", "total_token_throughput",
                "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "goodput", "errors", "prefix_cache",
                "server_metrics_delta", "metrics_error", "requests"]
SUMMARY_FIELDS = ["count", "mean", "stddev", "min", "p50", "p90", "p99", "max"]
GOODPUT_FIELDS = ["slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms", "num_good", "request_goodput"]
PREFIX_FIELDS = ["hits_delta", "queries_delta", "hit_ratio", "client_cached_token_ratio"]
REQUEST_FIELDS = ["index", "group", "prompt_len", "max_tokens", "sent", "status", "status_message",
                  "cancelled_by_limit", "finish_reason", "send_s", "end_s", "ttft_ms", "tpot_ms",
                  "e2e_ms", "num_tokens", "num_chunks", "usage", "token_times_ms"]
CSV_COLUMNS = ["phase", "request_rate", "index", "group", "prompt_len", "max_tokens", "sent",
               "status", "finish_reason", "send_s", "end_s", "ttft_ms", "tpot_ms", "e2e_ms",
               "num_tokens", "num_chunks", "prompt_tokens", "cached_prompt_tokens",
               "completion_tokens", "token_times_ms"]


def counter_deltas(before: dict, after: dict) -> dict[str, float]:
    names = ["kvserve_requests_finished_total", "kvserve_generation_tokens_total",
             "kvserve_prompt_tokens_total"]
    return {n: kf.metric_sum(after, n) - kf.metric_sum(before, n) for n in names}


def test_report_agrees_with_server_counters(kvserve_factory, tmp_path):
    d = kvserve_factory()
    before = d.metrics()
    n, out_len = 40, 16
    res, report, csv_path = run_loadgen(
        d, tmp_path, f"--num_requests={n}", f"--output_len={out_len}", "--prompt_len=48",
        "--prompt_len_dist=uniform", "--prompt_len_range=16", "--concurrency=8", "--seed=7",
        "--slo_ttft_ms=60000", "--slo_e2e_ms=60000")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "\r" not in res.stderr, "progress bar drawn although stderr is not a TTY"
    after = d.metrics()

    for f in TOP_FIELDS:
        assert f in report, f
    for f in MODEL_FIELDS:
        assert f in report["model"], f
    assert report["num_phases"] == 1 and len(report["phases"]) == 1
    phase = report["phases"][0]
    for f in PHASE_FIELDS:
        assert f in phase, f
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        for f in SUMMARY_FIELDS:
            assert f in phase[key], (key, f)
            assert phase[key][f] is not None, (key, f)
    for f in GOODPUT_FIELDS:
        assert f in phase["goodput"], f
    for f in PREFIX_FIELDS:
        assert f in phase["prefix_cache"], f

    # The workload asked for: every request completed with exactly out_len tokens.
    assert phase["num_completed"] == n and phase["num_failed"] == 0, phase["errors"]
    assert phase["errors"] == {}
    assert phase["total_output_tokens"] == n * out_len
    assert phase["goodput"]["num_good"] == n  # the SLOs are a minute: every request meets them
    reqs = phase["requests"]
    assert len(reqs) == n
    for r in reqs:
        for f in REQUEST_FIELDS:
            assert f in r, f
        assert r["status"] == "OK" and r["finish_reason"] == "length", r
        assert r["num_tokens"] == out_len and r["usage"]["completion_tokens"] == out_len
        assert len(r["token_times_ms"]) == out_len
        assert 32 <= r["prompt_len"] <= 64
        assert r["usage"]["prompt_tokens"] == r["prompt_len"]  # token ids are sent as given
        assert 0 < r["ttft_ms"] <= r["e2e_ms"]
    assert phase["total_prompt_tokens"] == sum(r["prompt_len"] for r in reqs)

    # The server counted the same (its counters, scraped by this test).
    deltas = counter_deltas(before, after)
    assert deltas["kvserve_requests_finished_total"] == n
    assert kf.metric_sum(after, "kvserve_requests_finished_total", finished_reason="length") - \
        kf.metric_sum(before, "kvserve_requests_finished_total", finished_reason="length") == n
    assert deltas["kvserve_generation_tokens_total"] == phase["total_output_tokens"]
    assert deltas["kvserve_prompt_tokens_total"] == phase["total_prompt_tokens"]
    # ... and so did loadgen's own scrape.
    server = phase["server_metrics_delta"]
    assert server is not None, phase["metrics_error"]
    for name, value in deltas.items():
        assert server[name] == value, (name, server[name], value)

    with csv_path.open(newline="") as f:
        rows = list(csv.DictReader(f))
        assert f.seek(0) == 0 and f.readline().strip().split(",") == CSV_COLUMNS
    assert len(rows) == n
    assert sum(int(r["num_tokens"]) for r in rows) == n * out_len
    assert all(r["status"] == "OK" for r in rows)
    # The stdout summary names the main figures.
    for text in ("Requests completed / sent / planned:", "TTFT (ms)", "Output token throughput"):
        assert text in res.stdout, res.stdout


def test_shared_prefix_reports_prefix_cache_hits(kvserve_factory, tmp_path):
    d = kvserve_factory()
    res, report, _ = run_loadgen(
        d, tmp_path, "--num_requests=16", "--output_len=4", "--prompt_len=8",
        "--shared_prefix_len=96", "--num_prefix_groups=2", "--concurrency=2", name="prefix")
    assert res.returncode == 0, res.stdout + res.stderr
    phase = report["phases"][0]
    assert phase["num_completed"] == 16
    assert phase["prefix_cache"]["hit_ratio"] is not None, phase["metrics_error"]
    assert phase["prefix_cache"]["hit_ratio"] > 0, phase["prefix_cache"]
    assert phase["prefix_cache"]["client_cached_token_ratio"] > 0
    groups = {r["group"] for r in phase["requests"]}
    assert groups == {0, 1}
    assert "Prefix cache hit ratio (server):" in res.stdout


def test_sweep_phases_and_plots(kvserve_factory, tmp_path):
    d = kvserve_factory()
    res, report, csv_path = run_loadgen(
        d, tmp_path, "--num_requests=8", "--output_len=8", "--prompt_len=16",
        "--sweep_rates=40,80", name="sweep")
    assert res.returncode == 0, res.stdout + res.stderr
    assert report["num_phases"] == 2
    assert [p["request_rate"] for p in report["phases"]] == [40, 80]
    assert all(p["num_completed"] == 8 for p in report["phases"])
    # Each phase has its own prompts (seed + phase): different first prompts' lengths are not
    # guaranteed, but the server saw 16 requests in all.
    assert sum(p["server_metrics_delta"]["kvserve_requests_finished_total"]
               for p in report["phases"]) == 16
    assert "rate" in res.stdout and "e2e_p99" in res.stdout  # the sweep table
    plot = kf.SOURCE_DIR / "tools" / "loadgen" / "plot.py"
    out_dir = tmp_path / "plots"
    for args in (["--json", str(tmp_path / "sweep.json")], ["--csv", str(csv_path)]):
        p = subprocess.run([sys.executable, str(plot), *args, "--out_dir", str(out_dir)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    for name in ("latency_cdf.png", "throughput_vs_rate.png", "latency_vs_rate.png"):
        data = (out_dir / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name


def test_server_killed_mid_run_loadgen_ends_with_errors(kvserve_factory, tmp_path):
    d = kvserve_factory()
    info = d.model_info()
    out_len = info.max_model_len - 32  # long outputs: requests are still running at the kill
    binary = kf.require_binary(loadgen_path())
    json_path = tmp_path / "killed.json"
    # 30 requests at 5/s: arrivals span ~6 s; the kill comes ~1.5 s in, so
    # some calls are in flight and the later ones find no server.
    cmd = [str(binary), f"--address={d.grpc_address}", "--num_requests=30", "--request_rate=5",
           f"--output_len={out_len}", "--prompt_len=16", f"--output_json={json_path}",
           "--request_timeout_s=120"]
    with open(tmp_path / "loadgen.stdout", "wb") as out, open(tmp_path / "loadgen.stderr", "wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    try:
        d.wait_metrics(lambda s: kf.metric_sum(s, "kvserve_generation_tokens_total") > 0,
                       timeout=20, what="tokens generated")
        time.sleep(1.0)
        d.process.send_signal(signal.SIGKILL)
        d.process.wait(10)
        killed_at = time.monotonic()
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail("kvserve-loadgen still running 30 s after the server was killed")
        ended_after = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    stderr = (tmp_path / "loadgen.stderr").read_text(errors="replace")
    assert rc == 1, f"expected exit status 1 (requests failed), got {rc}\n{stderr}"
    assert ended_after < 30
    phase = json.loads(json_path.read_text())["phases"][0]
    assert phase["num_failed"] > 0 and phase["num_completed"] < 30
    assert phase["num_completed"] + phase["num_failed"] + phase["num_not_sent"] == 30
    assert sum(phase["errors"].values()) == phase["num_failed"]
    assert "UNAVAILABLE" in phase["errors"], phase["errors"]
    failed = [r for r in phase["requests"] if r["sent"] and r["status"] != "OK"]
    assert all(r["end_s"] >= r["send_s"] for r in failed)
