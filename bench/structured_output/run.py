#!/usr/bin/env python3
"""The cost of structured outputs: the grammar mask's share of the engine step, and constrained
against unconstrained decoding, at 1, 8 and 32 concurrent requests through the daemon on the
real SmolLM2-135M-Instruct.

Run from the repository root after a build and the real-model fetch (.venv of scripts/setup.sh;
`.venv/bin/python tests/real_models/fetch_real_models.py`):
    .venv/bin/python bench/structured_output/run.py [--build build] [--rounds 2]

At each concurrency, --rounds rounds of two runs on one daemon, alternating which goes first:
N chat requests at once with a JSON-schema response_format (an object of bounded strings, an
enum and an integer), and the same N requests without it. Reported per concurrency:
  * mask share: kvserve_grammar_mask_seconds' sum over kvserve_step_duration_seconds' sum for
    the constrained runs (the masks are filled on the engine's sampling threads, between steps);
  * output tokens/s of each run kind (completion tokens over the run's wall time, medians) and
    their ratio.
Target: mask share under 5% at 32. Results: <out>/results.json and results.md (default
bench/results/structured_output).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "tests" / "real_models"))

import kvserve_fixtures as kf  # noqa: E402
from fetch_real_models import cache_dir  # noqa: E402

SCHEMA = {"type": "object", "additionalProperties": False,
          "required": ["name", "city", "role", "age"],
          "properties": {"name": {"type": "string", "maxLength": 24},
                         "city": {"type": "string", "maxLength": 16},
                         "role": {"enum": ["engineer", "teacher", "doctor", "artist"]},
                         "age": {"type": "integer", "minimum": 18, "maximum": 90}}}
FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA,
                                                 "strict": True}}


def run(url: str, n: int, constrained: bool, max_tokens: int) -> tuple[int, float]:
    import openai
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=600)

    def one(i: int) -> int:
        extra = {"response_format": FORMAT} if constrained else {}
        r = client.chat.completions.create(
            model="bench", max_tokens=max_tokens, temperature=0.7, seed=i,
            messages=[{"role": "user", "content": f"Describe person number {i} as JSON."}],
            **extra)
        return r.usage.completion_tokens

    start = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        tokens = sum(pool.map(one, range(n)))
    return tokens, time.perf_counter() - start


def sums(d: kf.Daemon) -> tuple[float, float]:
    m = d.metrics()
    return (kf.histogram_sum(m, "kvserve_grammar_mask_seconds"),
            kf.histogram_sum(m, "kvserve_step_duration_seconds"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max_tokens", type=int, default=64)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "structured_output"))
    args = ap.parse_args()
    os.environ["KVSERVE_BUILD_DIR"] = args.build
    model = cache_dir() / "smollm2-135m-instruct"
    if not (model / ".complete").exists():
        print(f"{model} is missing: run tests/real_models/fetch_real_models.py", file=sys.stderr)
        return 2
    d = kf.start_daemon(Path(tempfile.mkdtemp(prefix="kvserve-so-bench-")), "--http_port=-1",
                        "--served_model_name=bench", "--log_requests=false",
                        "--max_num_seqs=32", model=str(model))
    results = {}
    try:
        run(d.http_url, 1, True, 8)  # compiles the grammar once (cached by schema)
        for n in (1, 8, 32):
            rates = {"constrained": [], "free": []}
            mask = step = 0.0
            for r in range(args.rounds):
                for constrained in ((True, False) if r % 2 == 0 else (False, True)):
                    m0, s0 = sums(d)
                    tokens, seconds = run(d.http_url, n, constrained, args.max_tokens)
                    m1, s1 = sums(d)
                    rates["constrained" if constrained else "free"].append(tokens / seconds)
                    if constrained:
                        mask += m1 - m0
                        step += s1 - s0
            c, f = statistics.median(rates["constrained"]), statistics.median(rates["free"])
            results[n] = {"mask_share": round(mask / step, 4) if step else None,
                          "constrained_tok_s": round(c, 1), "free_tok_s": round(f, 1),
                          "ratio": round(c / f, 3) if f else None}
            print(n, results[n], flush=True)
    finally:
        d.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["| concurrency | mask share of the step | constrained tok/s | free tok/s | ratio |",
             "|---|---|---|---|---|"]
    for n, r in results.items():
        lines.append(f"| {n} | {r['mask_share']} | {r['constrained_tok_s']} | {r['free_tok_s']} | "
                     f"{r['ratio']} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
