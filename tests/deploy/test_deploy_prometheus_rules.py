"""deploy/prometheus: promtool checks the config and the rules and runs the
rules' unit tests; the Prometheus Operator copy of the rules is the same."""

from __future__ import annotations

import deploy_helpers as h


def test_promtool_check_config():
    promtool = h.require_tool("promtool", "KVSERVE_PROMTOOL")
    res = h.run([promtool, "check", "config", "prometheus.yml"], cwd=h.PROMETHEUS_DIR)
    assert "SUCCESS" in res.stdout, res.stdout
    # The config loads the alert rules.
    assert "1 rule files found" in res.stdout, res.stdout


def test_promtool_check_rules():
    promtool = h.require_tool("promtool", "KVSERVE_PROMTOOL")
    res = h.run([promtool, "check", "rules", "alerts.yml"], cwd=h.PROMETHEUS_DIR)
    assert f"SUCCESS: {len(h.alert_rules())} rules found" in res.stdout, res.stdout


def test_promtool_test_rules():
    promtool = h.require_tool("promtool", "KVSERVE_PROMTOOL")
    res = h.run([promtool, "test", "rules", "alerts_test.yml"], cwd=h.PROMETHEUS_DIR)
    assert "SUCCESS" in res.stdout, res.stdout


def test_every_alert_is_unit_tested_firing_and_quiet():
    tests = h.load_yaml(h.PROMETHEUS_DIR / "alerts_test.yml")["tests"]
    firing, quiet = set(), set()
    for t in tests:
        for case in t.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {r["alert"] for r in h.alert_rules()}
    assert names - firing == set(), f"alerts never shown firing: {names - firing}"
    assert names - quiet == set(), f"alerts never shown quiet: {names - quiet}"


def test_alerts_have_severity_summary_description():
    for r in h.alert_rules():
        assert r["labels"].get("severity") in ("critical", "warning"), r
        assert r["annotations"].get("summary"), r
        assert r["annotations"].get("description"), r


def test_required_alerts_exist():
    names = {r["alert"] for r in h.alert_rules()}
    assert {"KvserveEngineStalled", "KvserveKvAccountingBroken", "KvserveQueueGrowing",
            "KvserveRejectionsRising", "KvserveTtftP99High"} <= names


def test_prometheusrule_matches_alerts_yml():
    rule = h.load_yaml(h.K8S_DIR / "base" / "prometheusrule.yaml")
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == h.load_yaml(h.PROMETHEUS_DIR / "alerts.yml"), (
        "deploy/k8s/base/prometheusrule.yaml differs from deploy/prometheus/alerts.yml")
