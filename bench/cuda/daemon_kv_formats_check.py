#!/usr/bin/env python3
"""The daemon on the GPU with each --kv_cache_dtype, through the HTTP API.

For every format named: start `kvserve --backend=cuda --kv_cache_dtype=F` on
loopback (ports picked by the daemon; --backend=cpu runs the same checks on
the CPU backend, which is how CI keeps this script honest), then check that
  * /metrics' kvserve_server_info says the backend and the format (its
    kvserve_kv_cache_capacity_tokens is printed);
  * a greedy /v1/completions of 32 tokens (ignore_eos) from a 40-token prompt
    returns 32 tokens, and the same request again returns the same text.
Prints one line per format and exits 1 if any check failed. The standard
library only (the GPU machine has python3, not the test dependencies).

Usage: daemon_kv_formats_check.py [--backend=cuda|cpu] KVSERVE_BINARY MODEL FORMAT...
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request

READY = re.compile(r"kvserve ready grpc=\S+ metrics=([\d.]+):(\d+) http=([\d.]+):(\d+)")


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


def check(binary: str, model: str, fmt: str, backend: str) -> list[str]:
    problems: list[str] = []
    args = [binary, f"--model={model}", f"--backend={backend}", f"--kv_cache_dtype={fmt}",
            "--host=127.0.0.1", "--port=0", "--metrics_port=0", "--http_port=-1"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log: list[str] = []
    try:
        deadline = time.monotonic() + 180
        match = None
        while match is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            log.append(line)
            match = READY.search(line)
        if match is None:
            return ["no ready line; log tail:\n" + "".join(log[-15:])]
        metrics_url = f"http://{match.group(1)}:{match.group(2)}/metrics"
        base = f"http://{match.group(3)}:{match.group(4)}"
        request = {"model": model, "prompt": list(range(1, 41)), "max_tokens": 32,
                   "temperature": 0, "ignore_eos": True}
        first = post(base + "/v1/completions", request)
        again = post(base + "/v1/completions", request)
        tokens = first.get("usage", {}).get("completion_tokens")
        if tokens != 32:
            problems.append(f"completion_tokens {tokens}: {json.dumps(first)[:300]}")
        text = first["choices"][0]["text"]
        if again["choices"][0]["text"] != text:
            problems.append("greedy repeat differs")
        print(f"  {fmt}: {tokens} tokens, text {text[:60]!r}")
        with urllib.request.urlopen(metrics_url, timeout=30) as resp:
            metrics = resp.read().decode().splitlines()
        info = [l for l in metrics if l.startswith("kvserve_server_info{")]
        if not info or f'backend="{backend}"' not in info[0] or \
                f'kv_cache_dtype="{fmt}"' not in info[0]:
            problems.append(f"server_info: {info[:1]}")
        capacity = [l.split()[-1] for l in metrics
                    if l.startswith("kvserve_kv_cache_capacity_tokens")]
        print(f"  {fmt}: capacity {capacity[:1]} tokens (/metrics)")
    except Exception as e:  # noqa: BLE001 - report and go on to the next format
        problems.append(f"{type(e).__name__}: {e}")
    finally:
        proc.terminate()
        try:
            rest, _ = proc.communicate(timeout=60)
            log.append(rest or "")
        except subprocess.TimeoutExpired:
            proc.kill()
    # The startup line, for the record: it goes through the logger, not
    # stdout, and was not always in the captured output at exit.
    serving = [l for l in "".join(log).splitlines() if "serving model=" in l]
    print(f"  {fmt}: startup line {'seen' if serving else 'not captured'}")
    return problems


def main() -> int:
    argv = sys.argv[1:]
    backend = "cuda"
    if argv and argv[0].startswith("--backend="):
        backend = argv.pop(0).split("=", 1)[1]
    if len(argv) < 3 or backend not in ("cuda", "cpu"):
        print(__doc__)
        return 2
    binary, model, formats = argv[0], argv[1], argv[2:]
    failed = False
    for fmt in formats:
        problems = check(binary, model, fmt, backend)
        print(f"{model} --kv_cache_dtype={fmt}: {'PASS' if not problems else 'FAIL'}")
        for p in problems:
            print(f"    {p}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
