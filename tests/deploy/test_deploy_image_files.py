"""The Dockerfile, .dockerignore, the runtime-package script, compose and
the Grafana provisioning: consistent with each other and with the daemon.

Building the image is not done here (it compiles kvserve: minutes); that is
deploy/image_test.sh, run by hand.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest

import deploy_helpers as h


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    out, buf = [], ""
    for line in h.DOCKERFILE.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for w, a in instructions():
        if w == "FROM":
            out.append([])
        if out:
            out[-1].append((w, a))
    return out


def build_stage() -> list[tuple[str, str]]:
    return stages()[0]


def final_stage() -> list[tuple[str, str]]:
    return stages()[-1]


def one(stage, word: str) -> str:
    found = [a for w, a in stage if w == word]
    assert len(found) == 1, f"expected one {word}, found {found}"
    return found[0]


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def global_args() -> dict[str, str]:
    out = {}
    for w, a in instructions():
        if w == "FROM":
            break
        if w == "ARG":
            name, _, default = a.partition("=")
            out[name] = default
    return out


def test_variant_and_base_image_args():
    args = global_args()
    assert args["VARIANT"] == "cpu"
    assert args["BASE_IMAGE"] == "debian:bookworm-slim"
    assert args["RUNTIME_IMAGE"] == "debian:bookworm-slim"
    froms = [a for w, a in instructions() if w == "FROM"]
    assert froms == ["${BASE_IMAGE} AS build", "${RUNTIME_IMAGE} AS runtime"], froms


def test_entrypoint_and_cmd_flags_exist_and_ports_match():
    stage = final_stage()
    entry = exec_form(one(stage, "ENTRYPOINT"))
    cmd = exec_form(one(stage, "CMD"))
    assert entry[0] == "kvserve"
    argv = entry[1:] + cmd
    assert not h.unknown_flags(argv), h.unknown_flags(argv)
    flags = h.flag_values(argv)
    assert flags["host"] == "0.0.0.0" and flags["metrics_host"] == "0.0.0.0"
    assert flags["model"] == "builtin:tiny"
    exposed = sorted(int(p.split("/")[0]) for p in one(stage, "EXPOSE").split())
    assert exposed == sorted([int(flags["port"]), int(flags["metrics_port"])]) == [9400, 50051]


def test_healthcheck_probes_the_grpc_port_with_the_client():
    stage = final_stage()
    hc = one(stage, "HEALTHCHECK")
    options, _, command = hc.partition("CMD ")
    argv = exec_form(command)
    assert argv[0] == "kvserve-client" and argv[-1] == "health", argv
    address = h.flag_values(argv)["address"]
    port = h.flag_values(exec_form(one(stage, "ENTRYPOINT"))[1:])["port"]
    assert address.rsplit(":", 1)[1] == port
    assert re.search(r"--start-period=\d+s", options)


def test_non_root_numeric_user():
    user = one(final_stage(), "USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, user


def test_built_targets_and_copied_files_exist():
    runs = [a for w, a in build_stage() if w == "RUN"]
    targets = [m.split() for a in runs for m in re.findall(r"--target ([\w\s-]+?)\s*(?:&&|;|$)", a)]
    # Always the daemon, the client and the SentencePiece module; for
    # VARIANT=cuda also the CUDA backend module.
    assert targets == [["kvserve", "kvserve-client", "kvserve_sentencepiece"],
                       ["kvserve_cuda_backend"]], runs
    build = " ".join(runs)
    cmake_text = "\n".join(p.read_text() for p in h.SOURCE_DIR.glob("*/CMakeLists.txt"))
    for target in targets[0] + targets[1]:
        assert re.search(r"add_(executable|library)\(" + re.escape(target) + r"\b", cmake_text), target
    # Where the build stage copies them from, relative to the build dir.
    for rel in re.findall(r"/build/([\w/.-]+)", build):
        if rel == "lib/libkvserve_cuda_backend.so":
            continue  # copied only when built (VARIANT=cuda; a CPU build has none)
        if rel.startswith(("server/", "tools/", "lib/")):
            assert rel in ("server/kvserve", "tools/kvserve-client",
                           "lib/libkvserve_sentencepiece.so"), rel
            assert (h.BUILD_DIR / rel).is_file(), f"{h.BUILD_DIR / rel} (the Dockerfile copies it)"


def apt_install_list(run_args: str) -> set[str]:
    m = re.search(r"apt-get install -y --no-install-recommends (.*?)(&&|$)", run_args)
    return set(m.group(1).split()) if m else set()


def test_build_packages_come_from_setup_sh():
    setup = (h.SOURCE_DIR / "scripts" / "setup.sh").read_text()
    m = re.search(r"debian_packages=\((.*?)\)", setup, re.S)
    listed = set(m.group(1).split())
    packages = set()
    for w, a in build_stage():
        if w == "RUN":
            packages |= apt_install_list(a)
    assert packages, "no apt-get install in the build stage"
    assert packages <= listed, f"not in scripts/setup.sh: {packages - listed}"
    assert not packages & {"python3", "python3-venv", "python3-pip"}


def test_runtime_packages_script_on_the_host_build():
    binaries = [h.daemon_path(), h.BUILD_DIR / "lib" / "libkvserve_sentencepiece.so"]
    res = h.run(["sh", str(h.DEPLOY_DIR / "docker" / "runtime-packages.sh"), *map(str, binaries)])
    packages = res.stdout.split()
    assert packages == sorted(set(packages))
    for must in ("libc6", "libstdc++6", "libsentencepiece0"):
        assert must in packages, packages
    assert any(p.startswith("libgrpc++") for p in packages), packages
    assert any(p.startswith("libprotobuf") for p in packages), packages
    # KV-cache events: the runtime stage gets libzmq through ldd, as every library.
    assert any(p.startswith("libzmq") for p in packages), packages
    # Every one is a real, installed package.
    q = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Status}\\n", *packages],
                       capture_output=True, text=True)
    assert q.returncode == 0 and q.stdout.count("install ok installed") == len(packages), q


def test_runtime_packages_script_fails_on_unowned_library(tmp_path):
    """A library no package owns (here: a copy in a temp dir) is an error."""
    libz = subprocess.run(["sh", "-c", "ldd " + shlex.quote(str(h.daemon_path())) +
                           " | awk '/libz.so/ {print $3}'"], capture_output=True, text=True)
    path = libz.stdout.strip()
    assert path, "kvserve does not link zlib?"
    (tmp_path / "libz.so.1").write_bytes(open(path, "rb").read())
    res = subprocess.run(["sh", str(h.DEPLOY_DIR / "docker" / "runtime-packages.sh"),
                          str(h.daemon_path())], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(tmp_path)})
    assert res.returncode != 0 and "no package owns" in res.stderr, res


def test_image_argv_starts_the_daemon(tmp_path):
    stage = final_stage()
    argv = exec_form(one(stage, "ENTRYPOINT"))[1:] + exec_form(one(stage, "CMD"))
    with h.running_daemon(tmp_path, *argv) as d:
        assert "kvserve_server_info" in d.metrics_text()


def test_healthcheck_command_against_the_daemon(tmp_path):
    """The HEALTHCHECK's command, run with the host build's client, exits 0
    against a serving daemon and non-zero once nothing listens."""
    client = h.BUILD_DIR / "tools" / "kvserve-client"
    if not client.is_file():
        pytest.fail(f"{client} not built", pytrace=False)
    hc = one(final_stage(), "HEALTHCHECK")
    argv = exec_form(hc.partition("CMD ")[2])
    with h.running_daemon(tmp_path) as d:
        probe = [str(client)] + [a if not a.startswith("--address=") else f"--address={d.grpc_address}"
                                 for a in argv[1:]]
        ok = subprocess.run(probe, capture_output=True, text=True, timeout=30)
        assert ok.returncode == 0 and "SERVING" in ok.stdout, ok
    down = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    assert down.returncode != 0, down


def test_dockerignore():
    lines = {ln.strip() for ln in (h.SOURCE_DIR / ".dockerignore").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")}
    assert {"build*/", ".venv/", ".git"} <= lines, lines


# --- compose + Grafana provisioning -------------------------------------------


def compose() -> dict:
    return h.load_yaml(h.COMPOSE)


def test_compose_kvserve_service():
    svc = compose()["services"]["kvserve"]
    context = (h.COMPOSE.parent / svc["build"]["context"]).resolve()
    assert context == h.SOURCE_DIR.resolve()
    assert (context / svc["build"].get("dockerfile", "Dockerfile")).is_file()
    command = [re.sub(r"\$\{(\w+):-([^}]*)\}", r"\2", a) for a in svc["command"]]
    assert not h.unknown_flags(command), h.unknown_flags(command)
    published = {p.rsplit(":", 1)[1] for p in svc["ports"]}
    assert published == {"50051", "9400"}
    grace = int(svc["stop_grace_period"].rstrip("s"))
    assert grace > float(h.flag_values(command)["drain_timeout_s"])
    # The same probe as the image's HEALTHCHECK.
    hc = one(final_stage(), "HEALTHCHECK")
    assert svc["healthcheck"]["test"] == ["CMD", *exec_form(hc.partition("CMD ")[2])]


def test_compose_prometheus_scrapes_the_kvserve_service():
    c = compose()
    prom = c["services"]["prometheus"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in prom["volumes"]}
    assert (h.COMPOSE.parent / mounts["/etc/prometheus"]).resolve() == h.PROMETHEUS_DIR.resolve()
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom["command"]
    config = h.load_yaml(h.PROMETHEUS_DIR / "prometheus.yml")
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "kvserve"]
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == ["kvserve:9400"]
    # The alerts select job="kvserve".
    assert all('job="kvserve"' in r["expr"] for r in h.alert_rules() if "up{" in r["expr"])


def test_compose_grafana_provisioning():
    c = compose()
    graf = c["services"]["grafana"]
    mounts = {v.split(":")[1]: (h.COMPOSE.parent / v.split(":")[0]).resolve()
              for v in graf["volumes"] if v.startswith(".")}
    prov = mounts["/etc/grafana/provisioning"]
    assert prov == (h.DEPLOY_DIR / "grafana" / "provisioning").resolve()
    (provider,) = h.load_yaml(prov / "dashboards" / "kvserve.yml")["providers"]
    dash_dir = provider["options"]["path"]
    assert mounts[dash_dir] == h.DASHBOARD.parent.resolve()
    (ds,) = h.load_yaml(prov / "datasources" / "prometheus.yml")["datasources"]
    assert ds["type"] == "prometheus"
    host, port = re.match(r"http://([\w-]+):(\d+)", ds["url"]).groups()
    assert host in c["services"] and port == "9090"


def test_dashboard_structure():
    d = h.dashboard()
    assert d["uid"] == "kvserve"
    names = [v["name"] for v in d["templating"]["list"]]
    assert names[0] == "datasource"
    ids = []

    def walk(panels):
        for p in panels:
            ids.append(p["id"])
            if p["type"] != "row":
                assert p["datasource"]["uid"] == "${datasource}", p["title"]
                assert p["targets"], p["title"]
            walk(p.get("panels", []))

    walk(d["panels"])
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for title, expr in h.dashboard_exprs():
        if "kvserve_" in expr:
            assert 'job=~"$job"' in expr and 'instance=~"$instance"' in expr, (title, expr)
