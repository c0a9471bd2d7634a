#!/usr/bin/env python3
"""Speculative decoding by prompt lookup (--speculative_method=ngram) against no speculation,
batch 1, through the daemon's chat completions API, on the real SmolLM2-135M-Instruct.

Run from the repository root after a build and the real-model fetch (.venv of scripts/setup.sh;
`.venv/bin/python tests/real_models/fetch_real_models.py`):
    .venv/bin/python bench/speculative/run.py [--build build] [--rounds 3]

Two daemons serve the model side by side, one with --speculative_method=ngram, one without;
each workload's request goes to one, then the other, alternating which goes first, for
--rounds rounds (one request in flight at a time, so the two never share the cores). Workloads:
  * rename:  a function rewritten with one identifier renamed (copy-heavy);
  * json:    a paragraph reformatted as a JSON object of its sentences (copy-heavy);
  * quote:   an answer quoting its context (copy-heavy);
  * prose:   a free-form story (little to copy: the off-switch case).
Reported per workload: median decode tokens/s of each daemon (completion tokens over the time
from the first streamed token to the last), their ratio, whether the greedy outputs are
identical (they must be), and the speculating daemon's acceptance (accepted / proposed drafts,
from /metrics). Targets: >= 2.0x on the copy-heavy ones, >= 0.97x on prose.
Results: <out>/results.json and results.md (default bench/results/speculative).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "tests" / "real_models"))

import kvserve_fixtures as kf  # noqa: E402
from fetch_real_models import cache_dir  # noqa: E402

FUNCTION = '''def summarize(values):
    total = 0
    count = 0
    for value in values:
        if value is None:
            continue
        total += value
        count += 1
    if count == 0:
        return 0.0
    mean = total / count
    return round(mean, 3)
'''
PARAGRAPH = ("The lighthouse stood on the northern cliff for two hundred years. Its keeper lit "
             "the lamp every evening at dusk. Ships passing the rocks relied on its beam. In "
             "winter the storms grew so strong that the windows rattled. The keeper wrote each "
             "storm into a leather logbook.")
WORKLOADS = {
    "rename": f"Rewrite this Python function, renaming the variable `total` to `acc`. Output only "
              f"the code.\n\n{FUNCTION}",
    "json": f"Reformat this paragraph as a JSON object whose keys are s1, s2, ... and whose values "
            f"are its sentences, copied exactly.\n\n{PARAGRAPH}",
    "quote": f"Context: {PARAGRAPH}\n\nQuestion: What did the keeper do every evening? Answer by "
             f"quoting the context word for word, then quote the sentence after it.",
    "prose": "Write a short story about a fox who learns to sail.",
}
TARGET = {"rename": 2.0, "json": 2.0, "quote": 2.0, "prose": 0.97}


def chat_stream(url: str, prompt: str, max_tokens: int) -> tuple[list[str], float, int]:
    """(text pieces, seconds from the first token to the last, completion tokens)."""
    import openai
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=600)
    pieces, first, last, tokens = [], None, None, 0
    for chunk in client.chat.completions.create(
            model="bench", messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
            temperature=0, stream=True, stream_options={"include_usage": True}):
        now = time.perf_counter()
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
            first = first if first is not None else now
            last = now
    return pieces, (last - first) if first is not None and last is not None else 0.0, tokens


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max_tokens", type=int, default=160)
    ap.add_argument("--num_speculative_tokens", type=int, default=4)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "speculative"))
    args = ap.parse_args()
    import os
    os.environ["KVSERVE_BUILD_DIR"] = args.build
    model = cache_dir() / "smollm2-135m-instruct"
    if not (model / ".complete").exists():
        print(f"{model} is missing: run tests/real_models/fetch_real_models.py", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="kvserve-spec-bench-"))
    common = ["--http_port=-1", "--served_model_name=bench", "--log_requests=false"]
    plain = kf.start_daemon(tmp, *common, model=str(model))
    spec = kf.start_daemon(tmp, *common, "--speculative_method=ngram",
                           f"--num_speculative_tokens={args.num_speculative_tokens}",
                           "--prompt_lookup_min=2", "--prompt_lookup_max=4", model=str(model))
    results = {}
    try:
        for name, prompt in WORKLOADS.items():
            runs = {"off": [], "ngram": []}
            texts = {}
            m0 = spec.metrics()
            for r in range(args.rounds):
                order = [("off", plain), ("ngram", spec)]
                if r % 2:
                    order.reverse()
                for label, d in order:
                    pieces, seconds, tokens = chat_stream(d.http_url, prompt, args.max_tokens)
                    runs[label].append(tokens / seconds if seconds > 0 else 0.0)
                    texts[label] = "".join(pieces)
            m1 = spec.metrics()
            proposed = (kf.metric(m1, "kvserve_spec_decode_num_draft_tokens_total") -
                        kf.metric(m0, "kvserve_spec_decode_num_draft_tokens_total"))
            accepted = (kf.metric(m1, "kvserve_spec_decode_num_accepted_tokens_total") -
                        kf.metric(m0, "kvserve_spec_decode_num_accepted_tokens_total"))
            off, on = statistics.median(runs["off"]), statistics.median(runs["ngram"])
            results[name] = {
                "off_tok_s": round(off, 1), "ngram_tok_s": round(on, 1),
                "ratio": round(on / off, 3) if off else None, "target": TARGET[name],
                "identical": texts["off"] == texts["ngram"],
                "acceptance": round(accepted / proposed, 3) if proposed else None,
                "runs": runs,
            }
            print(name, results[name], flush=True)
    finally:
        plain.stop()
        spec.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["| workload | off tok/s | ngram tok/s | ratio | target | acceptance | same output |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['off_tok_s']} | {r['ngram_tok_s']} | {r['ratio']} | "
                     f">= {r['target']} | {r['acceptance']} | {r['identical']} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["identical"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
