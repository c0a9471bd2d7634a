"""deploy/k8s: both overlays render with `kubectl kustomize`, and the
rendered objects agree with each other and with the daemon's flags."""

from __future__ import annotations

import re

import pytest

import deploy_helpers as h

OVERLAYS = ["gpu", "cpu"]


def container(docs) -> dict:
    dep = h.the(docs, "Deployment", "kvserve")
    (c,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "kvserve"]
    return c


def args_of(c) -> list[str]:
    return list(c.get("command", [])[1:]) + list(c.get("args", []))


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request):
    return request.param, h.render_overlay(request.param)


def test_renders_the_expected_objects(rendered):
    _, docs = rendered
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == sorted([
        ("Deployment", "kvserve"), ("Service", "kvserve"), ("Service", "kvserve-headless"),
        ("ServiceMonitor", "kvserve"), ("PrometheusRule", "kvserve"),
        ("HorizontalPodAutoscaler", "kvserve"), ("PodDisruptionBudget", "kvserve")])
    hpa = h.the(docs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert h.the(docs, "PodDisruptionBudget")["apiVersion"] == "policy/v1"


def test_command_is_the_daemon_and_every_flag_exists(rendered):
    _, docs = rendered
    c = container(docs)
    assert c["command"][0].endswith("/kvserve"), c["command"]
    assert not h.unknown_flags(args_of(c)), (
        f"flags unknown to `kvserve --help`: {h.unknown_flags(args_of(c))}")


def test_probes_use_the_grpc_port(rendered):
    _, docs = rendered
    c = container(docs)
    flags = h.flag_values(args_of(c))
    port = int(flags["port"])
    assert port == 50051
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["grpc"] == port
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == port, (probe, c[probe])
    assert c["readinessProbe"]["grpc"]["service"] == "kvserve.v1.KvServe"
    # Liveness must not kill a pod that is draining (health NOT_SERVING).
    live = c["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] > float(flags["drain_timeout_s"])


def test_metrics_port_matches_service_and_servicemonitor(rendered):
    _, docs = rendered
    c = container(docs)
    flags = h.flag_values(args_of(c))
    metrics_port = int(flags["metrics_port"])
    assert metrics_port == 9400
    cports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert cports["metrics"] == metrics_port
    pod_labels = h.the(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]

    svc = h.the(docs, "Service", "kvserve")
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    sports = {p["name"]: p for p in svc["spec"]["ports"]}
    for name in ("grpc", "metrics"):
        target = sports[name]["targetPort"]
        resolved = cports[target] if isinstance(target, str) else int(target)
        assert resolved == cports[name], (name, target, cports)
        assert sports[name]["port"] == cports[name]

    sm = h.the(docs, "ServiceMonitor")
    selector = sm["spec"]["selector"]["matchLabels"]
    services = [s for s in h.find(docs, "Service")
                if selector.items() <= s["metadata"].get("labels", {}).items()]
    assert [s["metadata"]["name"] for s in services] == ["kvserve"], (
        "the ServiceMonitor must select exactly the kvserve Service (no double scrape)")
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint.get("path", "/metrics") == "/metrics"


def test_headless_service_for_client_side_balancing(rendered):
    _, docs = rendered
    svc = h.the(docs, "Service", "kvserve-headless")
    assert svc["spec"]["clusterIP"] == "None"
    pod_labels = h.the(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()


def test_grace_period_covers_prestop_and_drain(rendered):
    _, docs = rendered
    spec = h.the(docs, "Deployment")["spec"]["template"]["spec"]
    c = container(docs)
    drain = float(h.flag_values(args_of(c))["drain_timeout_s"])
    assert drain == 30
    pre = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre[0] in ("sleep", "/bin/sleep", "/usr/bin/sleep"), pre
    sleep_s = float(pre[1])
    assert 1 <= sleep_s <= 15
    assert spec["terminationGracePeriodSeconds"] > drain + sleep_s, (
        spec["terminationGracePeriodSeconds"], drain, sleep_s)


def test_security_context_and_shm(rendered):
    _, docs = rendered
    spec = h.the(docs, "Deployment")["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    c = container(docs)
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    shm = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert len(shm) == 1
    (vol,) = [v for v in spec["volumes"] if v["name"] == shm[0]["name"]]
    assert vol["emptyDir"]["medium"] == "Memory"


def test_hpa_pdb_target_the_deployment(rendered):
    _, docs = rendered
    dep = h.the(docs, "Deployment")
    assert "replicas" not in dep["spec"], "the HPA owns the replica count"
    hpa = h.the(docs, "HorizontalPodAutoscaler")
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Deployment", dep["metadata"]["name"])
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == "kvserve_num_requests_waiting"
    assert hpa["spec"]["minReplicas"] >= 1
    adapter = h.load_yaml(h.K8S_DIR / "prometheus-adapter-rules.yaml")
    assert any(r["name"]["as"] == "kvserve_num_requests_waiting"
               for r in adapter["rules"]["custom"])
    pdb = h.the(docs, "PodDisruptionBudget")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def gpu_count(c) -> list:
    res = c.get("resources", {})
    return [res.get(k, {}).get("nvidia.com/gpu") for k in ("requests", "limits")]


def test_gpu_overlay():
    docs = h.render_overlay("gpu")
    c = container(docs)
    assert gpu_count(c) == [1, 1]
    backend = h.flag_values(args_of(c)).get("backend", "auto")
    # auto: the GPU when the pod has one, else the CPU; the rendered args are
    # also started on this machine (test_rendered_args_start_the_daemon),
    # where --backend=cuda would exit for want of a GPU.
    assert backend == "auto"
    assert c["image"].endswith(":cuda")
    tol = h.the(docs, "Deployment")["spec"]["template"]["spec"].get("tolerations", [])
    assert any(t["key"] == "nvidia.com/gpu" for t in tol)


def test_cpu_overlay():
    docs = h.render_overlay("cpu")
    c = container(docs)
    assert gpu_count(c) == [None, None]
    assert "nvidia.com/gpu" not in str(h.the(docs, "Deployment"))
    assert h.flag_values(args_of(c))["backend"] == "cpu"
    assert c["image"].endswith(":cpu")
    req = c["resources"]["requests"]
    assert req.get("cpu") and req.get("memory"), req


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_args_start_the_daemon(overlay, tmp_path):
    """The Deployment's args start the real daemon (the listen addresses are
    then overridden with loopback ephemeral ports)."""
    args = args_of(container(h.render_overlay(overlay)))
    with h.running_daemon(tmp_path, *args) as d:
        text = d.metrics_text()
    model = h.flag_values(args)["model"]
    assert re.search(r'kvserve_server_info\{[^}]*model="' + re.escape(model), text), text[:2000]
