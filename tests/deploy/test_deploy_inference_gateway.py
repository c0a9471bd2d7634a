"""deploy/k8s/overlays/inference-gateway: kvserve behind the Gateway API
Inference Extension. The overlay renders, its objects point at each other
(pool -> pods and port, pool -> endpoint picker, route -> pool), and every
metric the endpoint picker is told to read is one the daemon exports, with the
type and labels the picker expects."""

from __future__ import annotations

import re
import urllib.request

import deploy_helpers as h

OVERLAY = "inference-gateway"


def docs():
    return h.render_overlay(OVERLAY)


def kvserve_container(rendered) -> dict:
    dep = h.the(rendered, "Deployment", "kvserve")
    (c,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "kvserve"]
    return c


def epp_flags(rendered) -> dict[str, str]:
    dep = h.the(rendered, "Deployment", "kvserve-epp")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return h.flag_values(c["args"])


def test_pool_selects_the_kvserve_pods_on_the_http_port():
    rendered = docs()
    pool = h.the(rendered, "InferencePool", "kvserve")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    pod_labels = h.the(rendered, "Deployment", "kvserve")["spec"]["template"]["metadata"]["labels"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    c = kvserve_container(rendered)
    http_port = int(h.flag_values(c["args"])["http_port"])
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == [http_port]
    assert {"name": "http", "containerPort": http_port, "protocol": "TCP"} in c["ports"]
    assert not h.unknown_flags(c["args"]), h.unknown_flags(c["args"])


def test_pool_names_the_endpoint_picker_and_the_route_names_the_pool():
    rendered = docs()
    pool = h.the(rendered, "InferencePool", "kvserve")
    ref = pool["spec"]["endpointPickerRef"]
    svc = h.the(rendered, "Service", ref["name"])
    assert ref["port"]["number"] in [p["port"] for p in svc["spec"]["ports"]]
    epp = h.the(rendered, "Deployment", ref["name"])
    assert svc["spec"]["selector"].items() <= epp["spec"]["template"]["metadata"]["labels"].items()
    flags = epp_flags(rendered)
    assert flags["pool-name"] == pool["metadata"]["name"]
    assert int(flags["grpc-port"]) == ref["port"]["number"]
    route = h.the(rendered, "HTTPRoute", "kvserve")
    (rule,) = route["spec"]["rules"]
    assert rule["backendRefs"] == [{"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                    "name": pool["metadata"]["name"]}]
    # The picker scrapes the pods' metrics port, not the pool's target port.
    c = kvserve_container(rendered)
    assert int(flags["model-server-metrics-port"]) == int(h.flag_values(c["args"])["metrics_port"])


def test_the_endpoint_pickers_metrics_are_exported_by_the_daemon(tmp_path):
    rendered = docs()
    flags = epp_flags(rendered)
    args = list(kvserve_container(rendered)["args"])
    # The rendered args, listening on loopback ephemeral ports instead.
    with h.running_daemon(tmp_path, *args, "--http_port=-1",
                          "--kv_events_endpoint=tcp://127.0.0.1:0") as d:
        text = d.metrics_text()
        with urllib.request.urlopen(d.http_url + "/health", timeout=10) as r:
            assert r.status == 200
    types, samples = h.exposition_families(text)
    for flag in ("total-queued-requests-metric", "total-running-requests-metric",
                 "kv-cache-usage-percentage-metric", "cache-info-metric"):
        name = flags[flag]
        assert types.get(name) == "gauge", f"--{flag}={name}: not a gauge the daemon exports"
    assert flags["lora-info-metric"] == ""  # no adapters: switched off
    info = [l for l in text.splitlines() if l.startswith(flags["cache-info-metric"] + "{")]
    assert len(info) == 1, info
    labels = label_values(info[0])
    server_info = [l for l in text.splitlines() if l.startswith("kvserve_server_info{")]
    capacity = [l for l in text.splitlines() if l.startswith("kvserve_kv_cache_blocks_capacity ")]
    assert labels["block_size"] == label_values(server_info[0])["block_size"], (info, server_info)
    assert int(labels["num_gpu_blocks"]) == int(float(capacity[0].split()[1])), (info, capacity)


def test_pods_publish_kv_events_for_llm_d():
    """llm-d's router: the pods carry its label and publish KV-cache events on
    port 5557, under the topic kv@<pod IP>:<HTTP port>@<served model>."""
    rendered = docs()
    dep = h.the(rendered, "Deployment", "kvserve")
    assert dep["spec"]["template"]["metadata"]["labels"]["llm-d.ai/inference-serving"] == "true"
    assert dep["metadata"]["labels"]["llm-d.ai/inference-serving"] == "true"
    c = kvserve_container(rendered)
    flags = h.flag_values(c["args"])
    assert flags["kv_events_endpoint"] == "tcp://0.0.0.0:5557"
    assert {"name": "kv-events", "containerPort": 5557, "protocol": "TCP"} in c["ports"]
    # $(POD_IP) is expanded by the kubelet from the container's env.
    (pod_ip,) = [e for e in c["env"] if e["name"] == "POD_IP"]
    assert pod_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    model = flags.get("served_model_name", "").split(",")[0] or flags["model"]
    assert flags["kv_events_topic"] == f"kv@$(POD_IP):{flags['http_port']}@{model}"
    assert not h.unknown_flags(c["args"]), h.unknown_flags(c["args"])


def label_values(sample_line: str) -> dict[str, str]:
    inside = sample_line[sample_line.index("{") + 1:sample_line.rindex("}")]
    return dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', inside))
