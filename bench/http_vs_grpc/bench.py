#!/usr/bin/env python3
"""HTTP (OpenAI API) vs gRPC through the same daemon, and 2,000 concurrent SSE streams.

Run from the repository root after a build (the .venv of scripts/setup.sh):
    .venv/bin/python bench/http_vs_grpc/bench.py [--build build] [--concurrency 64]

1. Throughput: one kvserve (builtin:tiny, CPU) serves the same closed-loop workload
   (--concurrency workers, --requests streaming requests of --prompt_len prompt bytes
   and --output_len output tokens, ignore_eos) through gRPC (grpc.aio, Generate) and
   through HTTP (POST /v1/completions, stream=true, include_usage; a minimal asyncio
   HTTP/1.1 client on keep-alive connections, so the Python client costs little),
   alternating APIs for --rounds rounds. Reported: output tokens/s of each run and
   the ratio HTTP / gRPC of the medians (measured in this one run, on this machine), and
   the daemon's CPU time per 1000 output tokens for each API (/proc/<pid>/stat): the
   server-side cost of each frontend, whichever client is faster. Prompts are unique
   per run, so no run is served from another's prefix cache.
2. Scale: --streams concurrent streaming chat requests (each its own connection,
   --chat_template on builtin:tiny, --stream_tokens tokens each), all sent at once.
   Reported: how many failed (non-200, an error event, or no [DONE]), and the daemon's
   peak RSS and thread count (/proc/<pid>/status, sampled every 100 ms) against idle.

Results: <out>/results.json and <out>/results.md (default bench/results/http_vs_grpc).
No assertion on speed anywhere; exit status 1 only if a scale request failed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import kvserve_fixtures as kf  # noqa: E402

READY = re.compile(r"kvserve ready grpc=(\S+):(\d+) metrics=(\S+):(\d+) http=(\S+):(\d+)")
TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def proc_status(pid: int) -> tuple[int, int]:
    """(VmRSS in KiB, Threads) of a process."""
    rss = threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss, threads


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_daemon(build: Path, tmp: Path, *flags: str) -> tuple[subprocess.Popen, dict]:
    out = tmp / "kvserve.stdout"
    err = tmp / "kvserve.stderr"
    args = [str(build / "server" / "kvserve"), "--backend=cpu",
            "--host=127.0.0.1", "--port=0", "--metrics_host=127.0.0.1", "--metrics_port=0",
            "--http_port=-1", "--log_requests=false", *flags]
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(args, stdout=o, stderr=e, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (m := READY.search(out.read_text(errors="replace"))):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit(f"kvserve did not start: {err.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)
    return proc, {"grpc": f"{m.group(1)}:{m.group(2)}", "http": (m.group(5), int(m.group(6)))}


# ---------------------------------------------------------------------------
# A minimal HTTP/1.1 client: one keep-alive connection, chunked SSE bodies.


class HttpConnection:
    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def open(self):
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    def close(self):
        if self.writer is not None:
            self.writer.close()

    async def post_sse(self, path: str, body: dict) -> tuple[int, list[str]]:
        """(status, data payloads) of one streaming request."""
        data = json.dumps(body).encode()
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        headers = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        if headers.get("transfer-encoding") != "chunked":
            await self.reader.readexactly(int(headers.get("content-length", 0)))
            return status, []
        payloads, pending = [], b""
        while True:
            size = int((await self.reader.readline()).strip(), 16)
            chunk = await self.reader.readexactly(size + 2)
            if size == 0:
                break
            pending += chunk[:-2]
            while b"\n\n" in pending:
                event, pending = pending.split(b"\n\n", 1)
                payloads.append(event.decode()[len("data: "):])
        return status, payloads


# ---------------------------------------------------------------------------
# 1. Throughput.


async def run_grpc(address: str, prompts: list[str], concurrency: int, output_len: int) -> int:
    import grpc  # noqa: PLC0415

    pb2, pb2_grpc = kf.pb()
    queue = list(prompts)
    tokens = 0
    async with grpc.aio.insecure_channel(address, options=kf.GRPC_OPTIONS) as channel:
        stub = pb2_grpc.KvServeStub(channel)

        async def worker():
            nonlocal tokens
            while queue:
                req = kf.text_request(queue.pop(), output_len, ignore_eos=True, temperature=0.0)
                async for resp in stub.Generate(req):
                    tokens += len(resp.token_ids)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tokens


async def run_http(address: tuple, prompts: list[str], concurrency: int, output_len: int) -> int:
    queue = list(prompts)
    tokens = 0

    async def worker():
        nonlocal tokens
        conn = HttpConnection(*address)
        await conn.open()
        try:
            while queue:
                status, events = await conn.post_sse("/v1/completions", {
                    "prompt": queue.pop(), "max_tokens": output_len, "temperature": 0,
                    "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True}})
                assert status == 200 and events[-1] == "[DONE]", (status, events[-2:])
                chunks = [json.loads(e) for e in events[:-1]]  # as a real client would
                tokens += chunks[-1]["usage"]["completion_tokens"]
        finally:
            conn.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tokens


def throughput(addresses: dict, pid: int, args) -> dict:
    runs = {"grpc": [], "http": []}
    server_cpu = {"grpc": [], "http": []}  # daemon CPU seconds per 1000 output tokens
    for r in range(args.rounds):
        for api in (("grpc", "http") if r % 2 == 0 else ("http", "grpc")):
            # Prompts unique to each run: no run is served from another's prefix cache.
            prompts = [f"{api}{r}-{i:05d} ".ljust(args.prompt_len, "x")
                       for i in range(args.requests)]
            start = time.perf_counter()
            cpu_start = cpu_seconds(pid)
            if api == "grpc":
                tokens = asyncio.run(run_grpc(addresses["grpc"], prompts, args.concurrency,
                                              args.output_len))
            else:
                tokens = asyncio.run(run_http(addresses["http"], prompts, args.concurrency,
                                              args.output_len))
            elapsed = time.perf_counter() - start
            server_cpu[api].append((cpu_seconds(pid) - cpu_start) / tokens * 1000)
            assert tokens == args.requests * args.output_len, (api, tokens)
            runs[api].append(tokens / elapsed)
            print(f"  round {r} {api}: {tokens} tokens in {elapsed:.2f} s = "
                  f"{tokens / elapsed:.0f} tokens/s, daemon CPU "
                  f"{server_cpu[api][-1] * 1000:.1f} ms per 1000 tokens", flush=True)
    grpc_median = statistics.median(runs["grpc"])
    http_median = statistics.median(runs["http"])
    return {"tokens_per_s": runs, "grpc_median": grpc_median, "http_median": http_median,
            "ratio_http_over_grpc": http_median / grpc_median,
            "daemon_cpu_s_per_1000_tokens": server_cpu,
            "cpu_grpc_median": statistics.median(server_cpu["grpc"]),
            "cpu_http_median": statistics.median(server_cpu["http"])}


# ---------------------------------------------------------------------------
# 2. Scale.


async def many_streams(address: tuple, n: int, tokens: int, pid: int) -> dict:
    failures: list[str] = []
    peak = {"rss_kib": 0, "threads": 0}
    done = asyncio.Event()

    async def sample():
        while not done.is_set():
            rss, threads = proc_status(pid)
            peak["rss_kib"] = max(peak["rss_kib"], rss)
            peak["threads"] = max(peak["threads"], threads)
            await asyncio.sleep(0.1)

    async def one(i: int):
        conn = HttpConnection(*address)
        try:
            await conn.open()
            status, events = await conn.post_sse("/v1/chat/completions", {
                "messages": [{"role": "user", "content": f"stream {i}"}],
                "max_tokens": tokens, "ignore_eos": True, "stream": True})
            if status != 200 or not events or events[-1] != "[DONE]" or any(
                    e.startswith('{"error"') for e in events):
                failures.append(f"{i}: status {status}, last events {events[-2:]}")
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failures.append(f"{i}: {type(e).__name__}: {e}")
        finally:
            conn.close()

    sampler = asyncio.create_task(sample())
    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    elapsed = time.perf_counter() - start
    done.set()
    await sampler
    return {"streams": n, "failed": len(failures), "failures": failures[:10],
            "seconds": elapsed, "peak_rss_mib": peak["rss_kib"] / 1024,
            "peak_threads": peak["threads"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", type=Path, default=ROOT / "build")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "http_vs_grpc")
    p.add_argument("--model", default="builtin:tiny")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--requests", type=int, default=512)
    p.add_argument("--prompt_len", type=int, default=32)
    p.add_argument("--output_len", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--streams", type=int, default=2000)
    p.add_argument("--stream_tokens", type=int, default=16)
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="kvserve-http-bench-"))
    kf.generate_stubs(tmp / "stubs")
    template = tmp / "chat.jinja"
    template.write_text(TEMPLATE)
    proc, addresses = start_daemon(
        args.build, tmp, f"--model={args.model}", f"--chat_template={template}", f"--max_num_seqs={args.concurrency}",
        f"--max_waiting_requests={max(4096, 2 * args.streams)}")
    results: dict = {"args": {k: str(v) for k, v in vars(args).items()}}
    try:
        idle_rss, idle_threads = proc_status(proc.pid)
        results["idle"] = {"rss_mib": idle_rss / 1024, "threads": idle_threads}
        print(f"throughput at {args.concurrency} concurrent:", flush=True)
        results["throughput"] = throughput(addresses, proc.pid, args)
        print(f"{args.streams} concurrent streaming chat requests:", flush=True)
        results["scale"] = asyncio.run(many_streams(addresses["http"], args.streams,
                                                    args.stream_tokens, proc.pid))
        print(f"  {results['scale']}", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    t, s = results["throughput"], results["scale"]
    md = [
        "| measure | value |", "|---|---|",
        f"| gRPC tokens/s (median of {args.rounds}, {args.concurrency} concurrent) | "
        f"{t['grpc_median']:.0f} |",
        f"| HTTP tokens/s (median of {args.rounds}, {args.concurrency} concurrent) | "
        f"{t['http_median']:.0f} |",
        f"| HTTP / gRPC | {t['ratio_http_over_grpc']:.3f} |",
        f"| daemon CPU per 1000 output tokens, gRPC / HTTP (median) | "
        f"{t['cpu_grpc_median'] * 1000:.1f} / {t['cpu_http_median'] * 1000:.1f} ms |",
        f"| {s['streams']} concurrent SSE chat streams: failed | {s['failed']} |",
        f"| ... wall time | {s['seconds']:.1f} s |",
        f"| ... daemon RSS idle / peak | {results['idle']['rss_mib']:.0f} / "
        f"{s['peak_rss_mib']:.0f} MiB |",
        f"| ... daemon threads idle / peak | {results['idle']['threads']} / "
        f"{s['peak_threads']} |",
    ]
    (args.out / "results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 1 if s["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
