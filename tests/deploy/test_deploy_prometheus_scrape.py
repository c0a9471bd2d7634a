"""A real Prometheus (Debian's /usr/bin/prometheus) scrapes the real daemon.

The daemon from $KVSERVE_BUILD_DIR serves one Generate; a Prometheus on
loopback scrapes its /metrics every second with deploy/prometheus/alerts.yml
loaded. Checked through Prometheus' HTTP API: the scraped values (server
info, generated tokens), every alert rule evaluating without error and none
firing, and every dashboard query evaluating to data.
"""

from __future__ import annotations

import subprocess
import time

import pytest

import deploy_helpers as h

MAX_TOKENS = 8
POLL_S = 30.0

# Dashboard queries that are legitimately empty on an idle, healthy daemon.
EMPTY_WHEN_IDLE = {"Engine heartbeat age"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """(daemon, prometheus base URL, generated token count)."""
    prometheus = h.require_tool("prometheus", "KVSERVE_PROMETHEUS")
    tmp = tmp_path_factory.mktemp("stack")
    with h.running_daemon(tmp / "daemon") as daemon:
        generated = len(h.generate(tmp / "stubs", daemon.grpc_address, max_tokens=MAX_TOKENS))
        port = h.free_port()
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {h.PROMETHEUS_DIR / 'alerts.yml'}\n"
            "scrape_configs:\n  - job_name: kvserve\n    scrape_interval: 1s\n"
            "    scrape_timeout: 1s\n"
            f"    static_configs:\n      - targets: ['{daemon.metrics_address}']\n")
        log = open(tmp / "prometheus.log", "wb")
        proc = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp)
        try:
            yield daemon, f"http://127.0.0.1:{port}", generated, tmp / "prometheus.log"
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            log.close()


def query(base: str, expr: str) -> list:
    body = h.prom_get(base, "/api/v1/query", query=expr)
    assert body["status"] == "success", f"{expr}: {body}"
    return body["data"]["result"]


def wait_for(what: str, fn, log_path, timeout: float = POLL_S):
    """Polls fn() (None/False: not yet) until it answers; fails after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except OSError as e:  # Prometheus not listening yet
            last = e
        else:
            if last:
                return last
        time.sleep(0.25)
    pytest.fail(f"timed out waiting for {what} (last: {last!r})\n--- prometheus log ---\n"
                f"{log_path.read_text(errors='replace')[-3000:]}", pytrace=False)


@pytest.fixture(scope="module")
def scraped(stack):
    """Waits until Prometheus has scraped the daemon after the Generate."""
    daemon, base, generated, log = stack

    def info():
        r = query(base, "kvserve_server_info")
        return r if r and r[0]["metric"].get("model") == "builtin:tiny" else None

    wait_for("kvserve_server_info{model=\"builtin:tiny\"}", info, log)

    def tokens():
        r = query(base, "kvserve_generation_tokens_total")
        return r if r and float(r[0]["value"][1]) == generated else None

    wait_for(f"kvserve_generation_tokens_total == {generated}", tokens, log)
    return stack


def test_server_info_and_generated_tokens(scraped):
    daemon, base, generated, _ = scraped
    info = query(base, "kvserve_server_info")
    assert len(info) == 1
    labels = info[0]["metric"]
    assert labels["model"] == "builtin:tiny"
    assert labels["backend"] == "cpu"
    assert labels["job"] == "kvserve"
    assert float(info[0]["value"][1]) == 1
    tokens = query(base, "kvserve_generation_tokens_total")
    assert [float(r["value"][1]) for r in tokens] == [generated]
    finished = query(base, 'kvserve_requests_finished_total{finished_reason="length"}')
    assert [float(r["value"][1]) for r in finished] == [1]
    ttft = query(base, "kvserve_time_to_first_token_seconds_count")
    assert [float(r["value"][1]) for r in ttft] == [1]
    assert [float(r["value"][1]) for r in query(base, 'up{job="kvserve"}')] == [1]


def test_alert_rules_evaluate_and_none_fires(scraped):
    _, base, _, log = scraped
    names = {r["alert"] for r in h.alert_rules()}

    def evaluated():
        body = h.prom_get(base, "/api/v1/rules")
        rules = [r for g in body["data"]["groups"] for r in g["rules"]]
        done = [r for r in rules if not r.get("lastEvaluation", "").startswith("0001")]
        return rules if len(done) == len(rules) == len(names) else None

    rules = wait_for("every alert rule evaluated once", evaluated, log)
    assert {r["name"] for r in rules} == names
    for r in rules:
        assert r["health"] == "ok", f"{r['name']}: {r.get('lastError')}"
        assert r["state"] == "inactive", f"{r['name']} is {r['state']} on a healthy daemon"


def test_every_dashboard_query_returns_data(scraped):
    """Each panel query evaluates on Prometheus and (but for EMPTY_WHEN_IDLE)
    returns series: the names, labels and arithmetic of the dashboard match
    what the daemon exports."""
    _, base, _, log = scraped
    # rate() needs two samples in its window.
    wait_for("3 scrapes", lambda: (r := query(base, 'count_over_time(up{job="kvserve"}[1m])'))
             and float(r[0]["value"][1]) >= 3, log)
    empty = []
    for title, expr in h.dashboard_exprs():
        result = query(base, h.grafana_to_promql(expr))
        if not result and title not in EMPTY_WHEN_IDLE:
            empty.append(f"{title}: {expr}")
    assert not empty, "dashboard queries with no data:\n" + "\n".join(empty)


def test_dashboard_variables_find_the_target(scraped):
    _, base, _, _ = scraped
    body = h.prom_get(base, "/api/v1/label/job/values", **{"match[]": "kvserve_server_info"})
    assert body["data"] == ["kvserve"]
    body = h.prom_get(base, "/api/v1/label/instance/values",
                      **{"match[]": 'kvserve_server_info{job=~".*"}'})
    assert len(body["data"]) == 1
    for q in h.dashboard_variable_queries():
        assert q.startswith("label_values(kvserve_server_info"), q
