"""Every kvserve_* metric the dashboard, the alerts, the HPA and the
prometheus-adapter rule use is exported by the real daemon.

The daemon from $KVSERVE_BUILD_DIR serves one Generate first, so that every
histogram has samples; then /metrics is scraped once and each referenced
name must be a sample name in it (a histogram referenced by its _bucket,
_sum or _count series, a counter or gauge by its own name).
"""

from __future__ import annotations

import re

import pytest

import deploy_helpers as h


@pytest.fixture(scope="module")
def exposition(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("daemon")
    with h.running_daemon(tmp) as d:
        h.generate(tmp / "stubs", d.grpc_address, max_tokens=8)
        text = d.metrics_text()
    return h.exposition_families(text)


def referenced() -> dict[str, set[str]]:
    """{metric name: {where it is used}}."""
    out: dict[str, set[str]] = {}

    def add(where: str, expr: str):
        for name in h.metric_names(expr):
            out.setdefault(name, set()).add(where)

    for title, expr in h.dashboard_exprs():
        add(f"dashboard panel {title!r}", expr)
    for q in h.dashboard_variable_queries():
        add("dashboard variable", q)
    for r in h.alert_rules():
        add(f"alert {r['alert']}", r["expr"])
    hpa = h.load_yaml(h.K8S_DIR / "base" / "hpa.yaml")
    for m in hpa["spec"]["metrics"]:
        add("HPA", m[m["type"].lower()]["metric"]["name"])
    adapter = h.load_yaml(h.K8S_DIR / "prometheus-adapter-rules.yaml")
    for rule in adapter["rules"]["custom"]:
        add("prometheus-adapter rule", rule["seriesQuery"])
        add("prometheus-adapter rule", rule["name"]["as"])
    return out


def test_references_were_found():
    names = referenced()
    # The panels the dashboard must have, by the metric they plot.
    for must in ("kvserve_time_to_first_token_seconds_bucket",
                 "kvserve_inter_token_latency_seconds_bucket",
                 "kvserve_e2e_request_latency_seconds_bucket",
                 "kvserve_prompt_tokens_total", "kvserve_generation_tokens_total",
                 "kvserve_num_requests_running", "kvserve_num_requests_waiting",
                 "kvserve_kv_cache_usage_ratio", "kvserve_kv_cache_blocks",
                 "kvserve_prefix_cache_hits_total", "kvserve_prefix_cache_queries_total",
                 "kvserve_num_preemptions_total", "kvserve_requests_rejected_total",
                 "kvserve_requests_finished_total"):
        assert must in names, f"{must} is used nowhere in deploy/"
        assert any(w.startswith("dashboard") for w in names[must]), (
            f"{must} is not on the dashboard")


def test_every_referenced_metric_is_exported(exposition):
    types, samples = exposition
    missing = {name: sorted(where) for name, where in referenced().items() if name not in samples}
    assert not missing, (
        "metrics used in deploy/ but not exported by kvserve:\n" +
        "\n".join(f"  {n}: {w}" for n, w in sorted(missing.items())))


def test_referenced_series_belong_to_the_right_family(exposition):
    """_bucket only of histograms; rate() of counters only; no bare histogram."""
    types, _ = exposition
    for name, where in referenced().items():
        family = h.family_of(name, types)
        assert family is not None, f"{name} ({sorted(where)}) belongs to no exported family"
        if name.endswith("_bucket"):
            assert types[family] == "histogram", (name, types[family])


def test_counters_are_only_used_through_rate(exposition):
    """A counter's raw value means nothing on a dashboard or in an alert."""
    types, _ = exposition
    exprs = list(h.dashboard_exprs()) + [(r["alert"], r["expr"]) for r in h.alert_rules()]
    for where, expr in exprs:
        for name in h.metric_names(expr):
            family = h.family_of(name, types)
            if types.get(family) == "counter" or name.endswith(("_bucket", "_sum", "_count")):
                assert re.search(r"(rate|increase)\(\s*" + re.escape(name) + r"\b", expr), (
                    f"{where}: {name} is used without rate()/increase(): {expr}")
