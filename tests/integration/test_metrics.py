"""The /metrics endpoint: valid Prometheus text, and counters that agree exactly
with what a client observed."""

from __future__ import annotations

import math
import subprocess

import grpc

import kvserve_fixtures as kf
from kvserve_fixtures import ids_request, reference_generate, stream, text_request

pb2, pb2_grpc = kf.pb()

PROMTOOL = "/usr/bin/promtool"

GAUGES = ["kvserve_num_requests_running", "kvserve_num_requests_waiting",
          "kvserve_kv_cache_blocks_capacity", "kvserve_kv_cache_usage_ratio",
          "kvserve_kv_cache_accounting_consistent"]
COUNTERS = ["kvserve_prompt_tokens_total", "kvserve_generation_tokens_total",
            "kvserve_prefix_cache_queries_total", "kvserve_prefix_cache_hits_total",
            "kvserve_num_preemptions_total"]
HISTOGRAMS = ["kvserve_time_to_first_token_seconds", "kvserve_inter_token_latency_seconds",
              "kvserve_e2e_request_latency_seconds", "kvserve_request_queue_time_seconds",
              "kvserve_request_prompt_tokens", "kvserve_request_generation_tokens",
              "kvserve_iteration_tokens", "kvserve_step_duration_seconds"]


def promtool_check(text: str) -> None:
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, (
        f"promtool check metrics exited {res.returncode}\n--- stdout ---\n{res.stdout}\n"
        f"--- stderr ---\n{res.stderr}\n--- metrics ---\n{text}")


def types_of(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            out[name] = kind.strip()
    return out


def check_histogram(samples: dict, name: str) -> None:
    """Buckets are cumulative and end with +Inf == _count (per label set)."""
    buckets = {}
    for (n, ls), v in samples.items():
        if n == name + "_bucket":
            labels = dict(ls)
            le = labels.pop("le")
            buckets.setdefault(frozenset(labels.items()), []).append((float(le), v))
    assert buckets, f"{name}: no buckets"
    for ls, bs in buckets.items():
        bs.sort()
        values = [v for _, v in bs]
        assert values == sorted(values), f"{name}{dict(ls)}: buckets not cumulative {bs}"
        assert bs[-1][0] == math.inf, f"{name}: no +Inf bucket"
        count = samples.get((name + "_count", ls))
        assert count == bs[-1][1], f"{name}{dict(ls)}: _count {count} != +Inf bucket {bs[-1]}"
        assert (name + "_sum", ls) in samples, f"{name}: no _sum"


def test_metrics_idle_daemon_is_valid_and_complete(kvserve_factory):
    d = kvserve_factory()
    with kf._HTTP.open(d.metrics_url, timeout=10) as resp:
        assert resp.status == 200
        ctype = resp.headers.get("Content-Type", "")
        text = resp.read().decode()
    assert ctype.startswith("text/plain"), ctype
    promtool_check(text)
    samples = kf.parse_metrics(text)
    types = types_of(text)
    for g in GAUGES + ["kvserve_kv_cache_blocks", "kvserve_server_info"]:
        assert types.get(g) == "gauge", (g, types.get(g))
    for c in COUNTERS + ["kvserve_requests_finished_total", "kvserve_requests_rejected_total"]:
        # Exposition libraries write the family name with or without _total.
        assert types.get(c) == "counter" or types.get(c[: -len("_total")]) == "counter", (
            c, types)
    for h in HISTOGRAMS:
        assert types.get(h) == "histogram", (h, types.get(h))
    for name in GAUGES + COUNTERS:
        assert kf.metric(samples, name) is not None, f"{name} (no labels) missing"
    assert kf.metric(samples, "kvserve_num_requests_running") == 0
    assert kf.metric(samples, "kvserve_num_requests_waiting") == 0
    assert kf.metric(samples, "kvserve_kv_cache_blocks", state="in_use") == 0
    assert kf.metric(samples, "kvserve_kv_cache_usage_ratio") == 0
    assert kf.metric(samples, "kvserve_kv_cache_accounting_consistent") == 1
    for c in COUNTERS:
        assert kf.metric(samples, c) == 0, c
    cap = kf.metric(samples, "kvserve_kv_cache_blocks_capacity")
    states = {s: kf.metric(samples, "kvserve_kv_cache_blocks", state=s)
              for s in ("in_use", "free_cached", "free_uncached")}
    assert None not in states.values(), states
    assert sum(states.values()) == cap, (states, cap)
    info = d.model_info()
    assert cap in (info.num_kv_blocks - 1, info.num_kv_blocks), (cap, info.num_kv_blocks)
    si = kf.metric_series(samples, "kvserve_server_info")
    assert len(si) == 1, si
    (labels, value), = si.items()
    labels = dict(labels)
    assert value == 1
    assert labels.get("model") == "builtin:tiny", labels
    assert labels.get("backend") == info.backend, labels
    assert labels.get("block_size") == str(info.block_size), labels
    assert labels.get("version") == info.version, labels


def test_metrics_agree_with_client(kvserve_factory):
    d = kvserve_factory()
    info = d.model_info()
    stub = d.stub
    accepted = []  # StreamResults of accepted requests

    # A: text prompt to max_tokens.
    a = stream(stub, text_request("Hello, kvserve!", 40, ignore_eos=True, request_id="metrics-a"))
    accepted.append(a.check_ok())
    assert a.final.finish_reason == pb2.FINISH_REASON_LENGTH
    # B: token-ids prompt (3 blocks) to max_tokens.
    b = stream(stub, ids_request([256] + list(b"Metrics " * 6), 7, ignore_eos=True))
    accepted.append(b.check_ok())
    assert b.final.finish_reason == pb2.FINISH_REASON_LENGTH
    # C: stops at EOS.
    eos_prompt = next(p for p in ["bH", "bl"] + [f"{x}{y}" for x in "cdexyz" for y in "HIJKLM"]
                      if reference_generate(p, 64)["token_ids"][-1] == kf.TINY_EOS)
    c = stream(stub, text_request(eos_prompt, 64))
    accepted.append(c.check_ok())
    assert c.final.finish_reason == pb2.FINISH_REASON_STOP, c
    # D: long, cancelled by the client after a few messages.
    n_long = info.max_model_len - 20

    def on_message(resp, call):
        if len(d_result_box) == 0:
            d_result_box.append(0)
        d_result_box[0] += len(resp.token_ids)
        if d_result_box[0] >= 3:
            call.cancel()

    d_result_box: list[int] = []
    dres = stream(stub, text_request("Cancel me please", n_long, ignore_eos=True),
                  on_message=on_message)
    assert dres.code == grpc.StatusCode.CANCELLED, dres
    d_received = len(dres.token_ids)
    assert 3 <= d_received < n_long, dres
    d_prompt = len("Cancel me please") + 1
    # E: invalid.
    e = stream(stub, text_request("Hello", -1))  # max_tokens below 0
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT, e

    def settled(s):
        return (kf.metric_sum(s, "kvserve_requests_finished_total") >= 4
                and kf.metric(s, "kvserve_num_requests_running") == 0
                and kf.metric(s, "kvserve_kv_cache_blocks", state="in_use") == 0)

    samples = d.wait_metrics(settled)
    text = d.metrics_text()
    promtool_check(text)
    samples = kf.parse_metrics(text)
    series = lambda n: kf.metric_series(samples, n)  # noqa: E731

    fin = lambda r: kf.metric(samples, "kvserve_requests_finished_total", 0,  # noqa: E731
                              finished_reason=r)
    assert (fin("length"), fin("stop"), fin("aborted"), fin("deadline"), fin("error")) == \
        (2, 1, 1, 0, 0), series("kvserve_requests_finished_total")
    assert kf.metric_sum(samples, "kvserve_requests_finished_total") == 4
    rej = lambda r: kf.metric(samples, "kvserve_requests_rejected_total", 0,  # noqa: E731
                              reason=r)
    assert rej("invalid_argument") == 1, series("kvserve_requests_rejected_total")
    assert kf.metric_sum(samples, "kvserve_requests_rejected_total") == 1, \
        series("kvserve_requests_rejected_total")

    prompt_sum = sum(r.final.usage.prompt_tokens for r in accepted) + d_prompt
    assert kf.metric(samples, "kvserve_prompt_tokens_total") == prompt_sum
    gen_known = sum(r.final.usage.completion_tokens for r in accepted)
    assert gen_known == sum(len(r.token_ids) for r in accepted)
    gen_total = kf.metric(samples, "kvserve_generation_tokens_total")
    d_generated = gen_total - gen_known
    assert d_received <= d_generated <= n_long, (gen_total, gen_known, d_received)

    for h in HISTOGRAMS:
        check_histogram(samples, h)
    hc = lambda n: kf.histogram_count(samples, n)  # noqa: E731
    hs = lambda n: kf.histogram_sum(samples, n)  # noqa: E731
    assert hc("kvserve_e2e_request_latency_seconds") == 4
    assert hc("kvserve_time_to_first_token_seconds") == 4  # D produced tokens too
    assert hc("kvserve_request_queue_time_seconds") == 4
    assert hc("kvserve_request_prompt_tokens") == 4
    assert hs("kvserve_request_prompt_tokens") == prompt_sum
    assert hc("kvserve_request_generation_tokens") == 4
    assert hs("kvserve_request_generation_tokens") == gen_total
    # At most one inter-token gap per output token after a request's first.
    itl = hc("kvserve_inter_token_latency_seconds")
    assert 0 < itl <= gen_total - 4, (itl, gen_total)
    assert hc("kvserve_step_duration_seconds") >= 1
    assert hc("kvserve_iteration_tokens") >= 1
    # Every computed token went through some step.
    assert hs("kvserve_iteration_tokens") >= gen_total

    queries = kf.metric(samples, "kvserve_prefix_cache_queries_total")
    hits = kf.metric(samples, "kvserve_prefix_cache_hits_total")
    assert 0 <= hits <= queries, (hits, queries)
    assert queries > 0, (queries, prompt_sum)

    assert kf.metric(samples, "kvserve_num_requests_running") == 0
    assert kf.metric(samples, "kvserve_num_requests_waiting") == 0
    assert kf.metric(samples, "kvserve_kv_cache_blocks", state="in_use") == 0
    assert kf.metric(samples, "kvserve_kv_cache_usage_ratio") == 0
    assert kf.metric(samples, "kvserve_kv_cache_accounting_consistent") == 1
    states = sum(kf.metric(samples, "kvserve_kv_cache_blocks", state=s)
                 for s in ("in_use", "free_cached", "free_uncached"))
    assert states == kf.metric(samples, "kvserve_kv_cache_blocks_capacity")
    assert kf.metric(samples, "kvserve_kv_cache_blocks", state="free_cached") > 0, \
        "finished requests' full blocks stay cached"
    si = {dict(ls).get("model") for ls in series("kvserve_server_info")}
    assert si == {"builtin:tiny"}, series("kvserve_server_info")

    # Logs: one line per finished request (4), with the request id.
    lines = [ln for ln in d.stderr_text().splitlines() if "request id=" in ln]
    assert len(lines) >= 4, lines
    assert any("metrics-a" in ln for ln in lines), lines


def test_prefix_cache_counters(kvserve_factory):
    d = kvserve_factory()
    prompt = "Prefix cache metrics: " + "abcdefghij" * 4  # 63 tokens with BOS
    first = stream(d.stub, text_request(prompt, 5, ignore_eos=True)).check_ok()
    s1 = d.wait_metrics(lambda s: kf.metric_sum(s, "kvserve_requests_finished_total") >= 1)
    q1 = kf.metric(s1, "kvserve_prefix_cache_queries_total")
    h1 = kf.metric(s1, "kvserve_prefix_cache_hits_total")
    assert h1 == 0 and first.final.usage.cached_prompt_tokens == 0, (h1, first)
    second = stream(d.stub, text_request(prompt, 5, ignore_eos=True)).check_ok()
    s2 = d.wait_metrics(lambda s: kf.metric_sum(s, "kvserve_requests_finished_total") >= 2)
    cached = second.final.usage.cached_prompt_tokens
    assert cached >= 48, second
    assert kf.metric(s2, "kvserve_prefix_cache_hits_total") - h1 == cached
    assert kf.metric(s2, "kvserve_prefix_cache_queries_total") - q1 >= cached
    assert second.token_ids == first.token_ids
