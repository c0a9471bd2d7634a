#!/usr/bin/env python3
"""Writes deploy/k8s/base/prometheusrule.yaml from deploy/prometheus/alerts.yml.

The PrometheusRule (Prometheus Operator) carries the same rule groups as the
plain rule file; run this after editing alerts.yml (needs PyYAML: Debian's
python3-yaml, or the project's .venv):
  python3 deploy/k8s/make-prometheusrule.py
tests/deploy/test_deploy_prometheus_rules.py checks that the two agree.
"""

from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[1]
HEADER = """\
# Prometheus Operator copy of deploy/prometheus/alerts.yml (the same groups,
# written by deploy/k8s/make-prometheusrule.py; tests/deploy checks that they
# are equal). What each alert means and what to do: deploy/README.md, section
# "Alerts". The Prometheus must select it (its ruleSelector / release label).
"""


def main() -> None:
    alerts = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "kvserve", "labels": {"app.kubernetes.io/name": "kvserve"}},
        "spec": alerts,
    }
    out = DEPLOY / "k8s" / "base" / "prometheusrule.yaml"
    out.write_text(HEADER + yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
