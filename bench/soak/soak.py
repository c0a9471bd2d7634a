#!/usr/bin/env python3
"""Soak and fault suite for the kvserve daemon (not run by CI; see README.md here).

Scenarios (each starts its own daemon on loopback ephemeral ports):
  soak      open-loop load at --load_factor x the measured capacity for
            --duration_s, with random cancels, client SIGKILLs, slow readers and
            deadline expiries mixed in; samples RSS, threads, open fds and the
            KV / request gauges every --sample_s, plots them (PNG) and fails
            when a gauge does not return to its baseline after the load, RSS
            grows after warm-up, or the daemon dies.
  streams   --streams concurrent streams at once (default 2000): all answered
            (finished, or refused with RESOURCE_EXHAUSTED), none lost.
  cancels   --cancels random cancels spread over every stage (queued,
            mid-prefill of long prompts, mid-decode); the KV pool and the
            request gauges return to zero.
  sigterm   SIGTERM under load: every accepted request finishes (or ends
            UNAVAILABLE only past the drain deadline), exit code 0.
  metrics   the /metrics port under 500 concurrent connections and slowloris
            clients: scrapes keep being answered, gRPC keeps serving.
  all       every scenario in turn.

Output: --out_dir/<scenario>.json (figures and verdict), soak.png / soak.csv.
Exit status 1 when any scenario fails.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import kvserve_fixtures as kf  # noqa: E402

import grpc  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------
# Process and gauge sampling.

def proc_sample(pid: int) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "rss_mib": int(fields["VmRSS"].split()[0]) / 1024.0,
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


def gauge_sample(daemon: kf.Daemon) -> dict:
    m = daemon.metrics()
    return {
        "running": kf.metric_sum(m, "kvserve_num_requests_running"),
        "waiting": kf.metric_sum(m, "kvserve_num_requests_waiting"),
        "blocks_in_use": kf.metric(m, "kvserve_kv_cache_blocks", state="in_use"),
        "accounting_ok": kf.metric(m, "kvserve_kv_cache_accounting_consistent"),
        "finished": kf.metric_sum(m, "kvserve_requests_finished_total"),
    }


def sample(daemon: kf.Daemon, t0: float) -> dict:
    return {"t": time.monotonic() - t0, **proc_sample(daemon.process.pid), **gauge_sample(daemon)}


def wait_idle(daemon: kf.Daemon, timeout: float = 120.0) -> dict:
    """Waits until nothing runs, waits or holds KV blocks; returns the last gauges."""
    deadline = time.monotonic() + timeout
    while True:
        g = gauge_sample(daemon)
        if (g["running"] == 0 and g["waiting"] == 0 and g["blocks_in_use"] == 0) or \
                time.monotonic() > deadline:
            return g
        time.sleep(0.2)


# ---------------------------------------------------------------------------
# Clients (grpc.aio: thousands of streams without a thread each).

class Client:
    def __init__(self, address: str, channels: int = 8):
        self.pb2, self.pb2_grpc = kf.pb()
        self.channels = [grpc.aio.insecure_channel(address, options=kf.GRPC_OPTIONS)
                         for _ in range(channels)]
        self.stubs = [self.pb2_grpc.KvServeStub(ch) for ch in self.channels]
        self.n = 0

    def request(self, prompt_len: int, max_tokens: int, rng: random.Random):
        ids = [rng.randrange(0, 256) for _ in range(prompt_len)]
        return self.pb2.GenerateRequest(
            token_ids=self.pb2.TokenIds(ids=ids),
            stopping=self.pb2.StoppingParams(max_tokens=max_tokens, ignore_eos=True))

    async def run(self, req, *, cancel_after_msgs: int | None = None,
                  cancel_after_s: float | None = None, slow_s: float = 0.0,
                  timeout: float | None = 600.0) -> str:
        """Streams one request; returns its outcome: ok, cancelled, or a status code name."""
        self.n += 1
        stub = self.stubs[self.n % len(self.stubs)]
        call = stub.Generate(req, timeout=timeout)
        if cancel_after_s is not None:
            asyncio.get_running_loop().call_later(cancel_after_s, call.cancel)
        msgs = 0
        try:
            async for _ in call:
                msgs += 1
                if cancel_after_msgs is not None and msgs >= cancel_after_msgs:
                    call.cancel()
                    return "cancelled"
                if slow_s:
                    await asyncio.sleep(slow_s)
            return "ok"
        except asyncio.CancelledError:
            return "cancelled"
        except grpc.aio.AioRpcError as e:
            return "cancelled" if e.code() == grpc.StatusCode.CANCELLED else e.code().name

    async def close(self):
        for ch in self.channels:
            await ch.close()


def kill_client_process(address: str, streams: int) -> subprocess.Popen:
    """A separate client process with open streams, to be SIGKILLed mid-stream."""
    code = (
        "import asyncio,random,sys;sys.path.insert(0,%r);sys.path.insert(0,%r);"
        "import soak;"
        "async def m():\n"
        " c=soak.Client(%r,2);r=random.Random(0)\n"
        " await asyncio.gather(*[c.run(c.request(64,512,r)) for _ in range(%d)])\n"
        "asyncio.run(m())"
    ) % (str(Path(__file__).parent), str(ROOT / "tests" / "integration"), address, streams)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


async def measure_capacity(client: Client, seconds: float, concurrency: int,
                           prompt_len: int, max_tokens: int) -> float:
    """Closed-loop requests/s at `concurrency`."""
    rng = random.Random(1)
    done = 0
    end = time.monotonic() + seconds

    async def worker():
        nonlocal done
        while time.monotonic() < end:
            if await client.run(client.request(prompt_len, max_tokens, rng)) == "ok":
                done += 1

    t0 = time.monotonic()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    return done / (time.monotonic() - t0)


# ---------------------------------------------------------------------------
# Scenarios. Each returns (passed, figures).

def start(args, tmp: Path, *flags: str) -> kf.Daemon:
    return kf.start_daemon(tmp, f"--max_waiting_requests={args.max_waiting}",
                           "--log_requests=false", *flags, model=args.model)


def check_baseline(before: dict, after: dict, failures: list, what: str) -> None:
    for key in ("running", "waiting", "blocks_in_use"):
        if after[key] != 0:
            failures.append(f"{what}: {key} = {after[key]} after the load (expected 0)")
    if after.get("accounting_ok", 1) != 1:
        failures.append(f"{what}: KV accounting inconsistent")
    if "fds" in before and after["fds"] > before["fds"] + args_slack_fds:
        failures.append(f"{what}: open fds {before['fds']} -> {after['fds']}")
    if "threads" in before and after["threads"] > before["threads"] + args_slack_threads:
        failures.append(f"{what}: threads {before['threads']} -> {after['threads']}")


args_slack_fds = 8       # gRPC may keep a few idle sockets / eventfds
args_slack_threads = 4   # gRPC's executor threads come and go


def scenario_soak(args, tmp: Path) -> tuple[bool, dict]:
    daemon = start(args, tmp)
    failures: list[str] = []
    samples: list[dict] = []
    outcomes: dict[str, int] = {}
    kills = 0

    async def main():
        nonlocal kills
        client = Client(daemon.grpc_address)
        cap = await measure_capacity(client, args.capacity_s, args.capacity_concurrency,
                                     args.prompt_len, args.max_tokens)
        rate = args.load_factor * cap
        log(f"soak: capacity {cap:.2f} req/s, offering {rate:.2f} req/s for {args.duration_s}s")
        await asyncio.sleep(1.0)
        t0 = time.monotonic()
        baseline = {**proc_sample(daemon.process.pid), **wait_idle(daemon)}
        samples.append({"t": 0.0, **baseline})
        rng = random.Random(args.seed)
        tasks: set[asyncio.Task] = set()
        killers: list[subprocess.Popen] = []
        next_sample = t0 + args.sample_s
        end = t0 + args.duration_s
        while time.monotonic() < end:
            await asyncio.sleep(rng.expovariate(rate))
            kind = rng.random()
            prompt = max(1, int(rng.expovariate(1.0 / args.prompt_len)))
            req = client.request(min(prompt, 4 * args.prompt_len), args.max_tokens, rng)
            if kind < 0.10:    # random cancel
                coro = client.run(req, cancel_after_s=rng.uniform(0.0, 3.0))
            elif kind < 0.15:  # slow reader
                coro = client.run(req, slow_s=0.2)
            elif kind < 0.25:  # deadline expiry
                coro = client.run(req, timeout=rng.uniform(0.05, 2.0))
            else:
                coro = client.run(req)
            task = asyncio.create_task(coro)
            tasks.add(task)
            task.add_done_callback(lambda t: (tasks.discard(t), outcomes.__setitem__(
                t.result(), outcomes.get(t.result(), 0) + 1)))
            if rng.random() < 0.01:  # a client process killed mid-stream
                killers.append(kill_client_process(daemon.grpc_address, 4))
            for k in list(killers):
                if k.poll() is None and rng.random() < 0.2:
                    k.send_signal(signal.SIGKILL)
                    k.wait()
                    killers.remove(k)
                    kills += 1
            if time.monotonic() >= next_sample:
                if daemon.process.poll() is not None:
                    failures.append(f"daemon died: exit {daemon.process.returncode}")
                    break
                samples.append(sample(daemon, t0))
                s = samples[-1]
                log(f"t={s['t']:.0f}s rss={s['rss_mib']:.1f}MiB threads={s['threads']} "
                    f"fds={s['fds']} running={s['running']:.0f} waiting={s['waiting']:.0f} "
                    f"blocks={s['blocks_in_use']:.0f} in_flight={len(tasks)}")
                next_sample += args.sample_s
        for k in killers:
            k.send_signal(signal.SIGKILL)
            k.wait()
            kills += 1
        if tasks:
            await asyncio.wait(tasks, timeout=600)
        await client.close()
        figures.update(capacity_rps=round(cap, 2), offered_rps=round(rate, 2),
                       completed_rps=round(outcomes.get("ok", 0) / args.duration_s, 2))
        return baseline

    figures: dict = {}
    baseline = asyncio.run(main())
    if daemon.process.poll() is None:
        time.sleep(2.0)
        after = {**proc_sample(daemon.process.pid), **wait_idle(daemon)}
        samples.append({"t": samples[-1]["t"] + 2.0 if samples else 0.0, **after})
        check_baseline(baseline, after, failures, "soak")
        # RSS after warm-up: the sample at 20% of the run against the last.
        warm = [s for s in samples if s["t"] >= 0.2 * args.duration_s]
        if len(warm) >= 2:
            growth = warm[-1]["rss_mib"] - warm[0]["rss_mib"]
            if growth > max(args.rss_growth_mib, 0.05 * warm[0]["rss_mib"]):
                failures.append(f"RSS grew {growth:.1f} MiB after warm-up "
                                f"({warm[0]['rss_mib']:.1f} -> {warm[-1]['rss_mib']:.1f})")
    code = daemon.stop()
    if code != 0:
        failures.append(f"daemon exit code {code} on SIGTERM")
    write_series(args.out_dir, samples)
    return not failures, {"failures": failures, **figures, "outcomes": outcomes,
                          "client_kills": kills,
                          "samples": len(samples),
                          "rss_mib_first_last": [samples[0]["rss_mib"], samples[-1]["rss_mib"]]
                          if samples else None}


def write_series(out_dir: Path, samples: list[dict]) -> None:
    if not samples:
        return
    keys = list(samples[0].keys())
    with open(out_dir / "soak.csv", "w") as f:
        f.write(",".join(keys) + "\n")
        for s in samples:
            f.write(",".join(str(s.get(k, "")) for k in keys) + "\n")
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        log("matplotlib not installed: soak.csv written, no PNG")
        return
    panels = [("rss_mib", "RSS (MiB)"), ("threads", "threads"), ("fds", "open fds"),
              ("running", "running requests"), ("waiting", "waiting requests"),
              ("blocks_in_use", "KV blocks in use")]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.0 * len(panels)), sharex=True)
    t = [s["t"] for s in samples]
    for ax, (key, label) in zip(axes, panels):
        ax.plot(t, [s[key] for s in samples], marker=".")
        ax.set_ylabel(label, fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(out_dir / "soak.png", dpi=100)
    log(f"wrote {out_dir / 'soak.png'}")


def finish_burst(daemon: kf.Daemon, before: dict, results: list[str], allowed: tuple,
                 failures: list[str], what: str) -> tuple[bool, dict]:
    """Checks a burst's outcomes and the daemon's return to baseline, then stops it."""
    counts = {r: results.count(r) for r in set(results)}
    unexpected = {k: v for k, v in counts.items() if k not in allowed}
    if unexpected:
        failures.append(f"unexpected outcomes {unexpected}")
    time.sleep(1.0)
    check_baseline(before, {**proc_sample(daemon.process.pid), **wait_idle(daemon)}, failures, what)
    if (code := daemon.stop()) != 0:
        failures.append(f"exit code {code}")
    return not failures, {"failures": failures, "outcomes": counts}


def scenario_streams(args, tmp: Path) -> tuple[bool, dict]:
    daemon = start(args, tmp, "--max_num_seqs=256")
    failures: list[str] = []

    async def main():
        client = Client(daemon.grpc_address, channels=16)
        rng = random.Random(2)
        reqs = [client.request(16, 8, rng) for _ in range(args.streams)]
        results = await asyncio.gather(*[client.run(r) for r in reqs])
        await client.close()
        return results

    before = proc_sample(daemon.process.pid)
    results = asyncio.run(main())
    if len(results) != args.streams:
        failures.append(f"{args.streams - len(results)} streams lost")
    return finish_burst(daemon, before, results, ("ok", "RESOURCE_EXHAUSTED"), failures, "streams")


def scenario_cancels(args, tmp: Path) -> tuple[bool, dict]:
    daemon = start(args, tmp, "--max_num_batched_tokens=256", "--max_num_seqs=16")
    failures: list[str] = []

    async def main():
        client = Client(daemon.grpc_address)
        rng = random.Random(3)
        coros = []
        for i in range(args.cancels):
            stage = i % 3
            if stage == 0:    # queued: many at once, cancelled almost immediately
                coros.append(client.run(client.request(64, 64, rng),
                                        cancel_after_s=rng.uniform(0.0, 0.05)))
            elif stage == 1:  # mid-prefill of a long prompt
                coros.append(client.run(client.request(900, 16, rng),
                                        cancel_after_s=rng.uniform(0.01, 0.5)))
            else:             # mid-decode: after a few messages
                coros.append(client.run(client.request(16, 256, rng),
                                        cancel_after_msgs=rng.randint(1, 20)))
        results = []
        for i in range(0, len(coros), 100):  # waves of 100
            results += await asyncio.gather(*coros[i:i + 100])
        await client.close()
        return results

    before = proc_sample(daemon.process.pid)
    results = asyncio.run(main())
    return finish_burst(daemon, before, results, ("ok", "cancelled", "RESOURCE_EXHAUSTED"),
                        failures, "cancels")


def scenario_sigterm(args, tmp: Path) -> tuple[bool, dict]:
    daemon = start(args, tmp, "--drain_timeout_s=120")
    failures: list[str] = []

    async def main():
        client = Client(daemon.grpc_address)
        rng = random.Random(4)
        tasks = [asyncio.create_task(client.run(client.request(32, 64, rng)))
                 for _ in range(args.sigterm_requests)]
        # SIGTERM once every request has reached the server (some are running).
        wait_until = time.monotonic() + 30
        while time.monotonic() < wait_until:
            g = await asyncio.to_thread(gauge_sample, daemon)
            if g["running"] + g["waiting"] + g["finished"] >= args.sigterm_requests:
                break
            await asyncio.sleep(0.05)
        daemon.signal(signal.SIGTERM)
        results = await asyncio.gather(*tasks)
        await client.close()
        return results

    results = asyncio.run(main())
    counts = {r: results.count(r) for r in set(results)}
    if counts.get("ok", 0) != args.sigterm_requests:
        failures.append(f"accepted requests not all finished: {counts}")
    try:
        code = daemon.process.wait(60)
    except subprocess.TimeoutExpired:
        daemon.process.kill()
        code = "timeout"
    if code != 0:
        failures.append(f"exit code {code}")
    return not failures, {"failures": failures, "outcomes": counts, "exit_code": code}


def scenario_metrics(args, tmp: Path) -> tuple[bool, dict]:
    daemon = start(args, tmp)
    failures: list[str] = []
    host, port = daemon.metrics_address.split(":")
    fds_before = proc_sample(daemon.process.pid)["fds"]

    def connect() -> socket.socket | None:
        try:
            return socket.create_connection((host, int(port)), timeout=10)
        except OSError:
            return None

    idle = [connect() for _ in range(500)]  # open, idle connections
    # Slowloris: a partial request, one more header line now and then.
    loris = [connect() for _ in range(50)]
    for s in loris:
        if s is not None:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    refused = sum(s is None for s in idle + loris)
    scrape_s: list[float] = []
    grpc_ok = 0
    for _ in range(10):
        for s in loris:
            try:
                if s is not None:
                    s.sendall(b"X-a: b\r\n")
            except OSError:
                pass
        t = time.monotonic()
        try:
            daemon.metrics_text(timeout=30)
            scrape_s.append(time.monotonic() - t)
        except Exception as e:  # noqa: BLE001
            failures.append(f"scrape not answered within 30 s under load: {e!r}")
        try:
            r = kf.stream(daemon.stub, kf.ids_request([1, 2, 3], 4), timeout=30)
            grpc_ok += r.code == grpc.StatusCode.OK
        except Exception as e:  # noqa: BLE001
            failures.append(f"gRPC failed under metrics load: {e!r}")
        time.sleep(0.5)
    for s in idle + loris:
        if s is not None:
            s.close()
    if grpc_ok != 10:
        failures.append(f"only {grpc_ok}/10 Generate calls succeeded")
    time.sleep(3.0)
    fds_after = proc_sample(daemon.process.pid)["fds"]
    if fds_after > fds_before + args_slack_fds:
        failures.append(f"open fds {fds_before} -> {fds_after} after the clients left")
    if (code := daemon.stop()) != 0:
        failures.append(f"exit code {code}")
    return not failures, {"failures": failures, "connections_refused": refused,
                          "scrape_seconds": [round(x, 3) for x in scrape_s], "grpc_ok": grpc_ok,
                          "fds_before_after": [fds_before, fds_after]}


SCENARIOS = {"soak": scenario_soak, "streams": scenario_streams, "cancels": scenario_cancels,
             "sigterm": scenario_sigterm, "metrics": scenario_metrics}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", choices=[*SCENARIOS, "all"])
    p.add_argument("--out_dir", type=Path, default=Path("soak-results"))
    p.add_argument("--model", default="builtin:small")
    p.add_argument("--duration_s", type=float, default=1800)
    p.add_argument("--sample_s", type=float, default=10)
    p.add_argument("--load_factor", type=float, default=2.0)
    p.add_argument("--capacity_s", type=float, default=20)
    p.add_argument("--capacity_concurrency", type=int, default=32)
    p.add_argument("--prompt_len", type=int, default=64)
    p.add_argument("--max_tokens", type=int, default=32)
    p.add_argument("--max_waiting", type=int, default=1024)
    p.add_argument("--rss_growth_mib", type=float, default=16)
    p.add_argument("--streams", type=int, default=2000)
    p.add_argument("--cancels", type=int, default=1000)
    p.add_argument("--sigterm_requests", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stubs = Path(tempfile.mkdtemp(prefix="kvserve-soak-stubs-"))
    kf.generate_stubs(stubs)
    sys.path.insert(0, str(stubs))
    # Client processes (the ones SIGKILLed) import the same stubs.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(stubs), *filter(None, [os.environ.get("PYTHONPATH")])])
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    all_ok = True
    for name in names:
        log(f"== {name}")
        with tempfile.TemporaryDirectory(prefix=f"kvserve-soak-{name}-") as tmp:
            ok, figures = SCENARIOS[name](args, Path(tmp))
        figures["passed"] = ok
        (args.out_dir / f"{name}.json").write_text(json.dumps(figures, indent=2, default=str))
        log(f"{name}: {'PASS' if ok else 'FAIL'} {json.dumps(figures, default=str)[:600]}")
        all_ok &= ok
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
