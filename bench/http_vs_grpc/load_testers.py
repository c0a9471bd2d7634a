#!/usr/bin/env python3
"""GuideLLM (PyPI, through the OpenAI HTTP API) against kvserve-loadgen (gRPC) on
the same workload and the same daemon.

    .venv/bin/python bench/http_vs_grpc/load_testers.py [--concurrency 8]
        [--requests 64] [--prompt 256] [--output 64] [--rounds 3]

One checkpoint (a random Llama, hidden --hidden, --layers layers, with a byte-level
BPE tokenizer: GuideLLM makes its synthetic prompts with the model's tokenizer) is
served by one kvserve daemon (CPU). Each round runs GuideLLM (concurrent profile,
/v1/completions, streaming) and then kvserve-loadgen (closed loop, Generate stream,
ignore_eos) with the same concurrency, request count and prompt / output lengths.
Reported per tool: requests, prompt and output tokens as the tool counted them and
as the server counted them (counter deltas of the round), and the medians of TTFT,
ITL and TPOT over the rounds. Prompts differ between tools (GuideLLM's synthetic
text, loadgen's random ids), never between requests, so the prefix cache plays no
part. Nothing is asserted on time.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import guidellm_runner as gl  # noqa: E402
import kvserve_fixtures as kf  # noqa: E402

COUNTERS = {"requests": ("kvserve_requests_finished_total", {}),
            "prompt_tokens": ("kvserve_prompt_tokens_total", {}),
            "output_tokens": ("kvserve_generation_tokens_total", {})}


def server_delta(before: dict, after: dict) -> dict:
    return {k: kf.metric_sum(after, name) - kf.metric_sum(before, name)
            for k, (name, _) in COUNTERS.items()}


def run_loadgen(d: kf.Daemon, out: Path, args, seed: int) -> dict:
    loadgen = kf.BUILD_DIR / "tools" / "loadgen" / "kvserve-loadgen"
    subprocess.run([str(loadgen), f"--address={d.grpc_address}", f"--concurrency={args.concurrency}",
                    f"--num_requests={args.requests}", f"--prompt_len={args.prompt}",
                    f"--output_len={args.output}", f"--seed={seed}",
                    f"--output_json={out}"], check=True, capture_output=True, timeout=1800)
    p = json.loads(out.read_text())["phases"][0]
    return dict(successful=p["num_completed"], errored=p["num_failed"],
                prompt_tokens=p["total_prompt_tokens"], output_tokens=p["total_output_tokens"],
                ttft_ms_p50=p["ttft_ms"]["p50"], itl_ms_p50=p["itl_ms"]["p50"],
                tpot_ms_p50=p["tpot_ms"]["p50"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "load_testers"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kvserve-load-testers-"))
    ckpt = gl.make_checkpoint(work / "ckpt", hidden=args.hidden, layers=args.layers)
    d = kf.start_daemon(work, "--http_port=-1", "--log_requests=false", model=str(ckpt))
    rows = {"guidellm (HTTP)": [], "kvserve-loadgen (gRPC)": []}
    try:
        for r in range(args.rounds):
            before = d.metrics()
            g = gl.summary(gl.run_guidellm(
                d.http_url, ckpt, out / f"guidellm-{r}.json", concurrency=args.concurrency,
                num_requests=args.requests, prompt_tokens=args.prompt, output_tokens=args.output))
            mid = d.metrics()
            l = run_loadgen(d, out / f"loadgen-{r}.json", args, seed=r + 1)
            after = d.metrics()
            rows["guidellm (HTTP)"].append((g, server_delta(before, mid)))
            rows["kvserve-loadgen (gRPC)"].append((l, server_delta(mid, after)))
    finally:
        rc = d.stop()
    lines = [f"# GuideLLM vs kvserve-loadgen: concurrency {args.concurrency}, {args.requests} requests "
             f"x ({args.prompt} in, {args.output} out), {args.rounds} rounds, hidden {args.hidden}, "
             f"{args.layers} layers", "",
             "| tool | ok / failed (round 1) | tokens in / out, tool (round 1) | tokens in / out, server (round 1) "
             "| TTFT p50 ms | ITL p50 ms | TPOT p50 ms |", "|---|---|---|---|---|---|---|"]
    for tool, runs in rows.items():
        t, s = runs[0]
        med = {k: statistics.median(x[0][k] for x in runs) for k in ("ttft_ms_p50", "itl_ms_p50", "tpot_ms_p50")}
        lines.append(f"| {tool} | {t['successful']} / {t['errored']} | {t['prompt_tokens']} / {t['output_tokens']} "
                     f"| {s['prompt_tokens']:.0f} / {s['output_tokens']:.0f} | {med['ttft_ms_p50']:.2f} "
                     f"| {med['itl_ms_p50']:.2f} | {med['tpot_ms_p50']:.2f} |")
    text = "\n".join(lines)
    print(text)
    (out / "results.md").write_text(text + "\n")
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
