"""llama.cpp's KV cache formats on the real trained models, measured the way
tests/real_models/formats_real_test.cc measures kvserve's (the peer figures
that test's bounds and docs/engine.md quote).

  .venv/bin/python bench/kv_formats_vs_llamacpp/run.py [--work DIR]
      [--llama_cpp_build DIR] [--chunks 4] [--threads N] [--out results.json]

What it does (nothing is written into the repository):
  1. builds llama-perplexity from the llama-cpp-python source distribution
     (bench/llamacpp_peer.py) into a temporary directory, or reuses
     --llama_cpp_build;
  2. per real model (the GGUF files tests/real_models/fetch_real_models.py
     keeps beside the converted checkpoints: SmolLM2-135M-Instruct Q4_1,
     Gemma 3 270M Q4_K_M), runs llama-perplexity over the first --chunks
     chunks of 512 tokens of /usr/share/common-licenses/GPL-3 with an f32 K/V
     cache (flash attention on: llama.cpp needs it for a quantized V cache),
     saving its logits (--kl-divergence-base), then with K and V in q8_0, q4_0
     and q4_1 (--kl-divergence against the f32 run);
  3. prints, per model and format, what llama-perplexity reports: the share of
     positions whose top token is the f32 cache's ("same top p"), the mean KL
     divergence from the f32 cache's distribution and the perplexity against
     the f32 cache's.
The protocol (llama-perplexity's): each chunk is its own sequence whose first
token becomes BOS where the vocabulary adds one; positions 256..510 of each
chunk are scored (the next token of each), 255 per chunk.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
REPO = os.path.abspath(os.path.join(BENCH, ".."))
sys.path.insert(0, BENCH)
from llamacpp_peer import build_llama_cpp  # noqa: E402

TEXT = "/usr/share/common-licenses/GPL-3"
MODELS = ["smollm2-135m-instruct", "gemma3-270m"]
FORMATS = ["q8_0", "q4_0", "q4_1"]


def model_cache():
    out = subprocess.run([sys.executable, os.path.join(REPO, "tests/real_models/fetch_real_models.py"),
                          "--print-dir"], check=True, capture_output=True, text=True).stdout
    return out.strip()


def perplexity(build, gguf, chunks, threads, cache_type, base_file, kl):
    cmd = [os.path.join(build, "bin", "llama-perplexity"), "-m", gguf, "-f", TEXT, "-c", "512",
           "--chunks", str(chunks), "-t", str(threads), "-fa", "on", "-ctk", cache_type, "-ctv",
           cache_type, "--kl-divergence-base", base_file]
    if kl:
        cmd.append("--kl-divergence")
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stderr[-3000:]}")
    return res.stdout + res.stderr


def number(pattern, text):
    m = re.search(pattern, text)
    if not m:
        raise RuntimeError(f"no match for {pattern!r} in llama-perplexity's output")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", help="where llama.cpp is built (default: a temporary directory)")
    ap.add_argument("--llama_cpp_build", help="an existing llama.cpp build directory")
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", help="also write the results as JSON here")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="kvserve-llamacpp-")
    build = args.llama_cpp_build or build_llama_cpp(work, ["llama-perplexity"])
    cache = model_cache()
    results = {}
    for name in MODELS:
        gguf = os.path.join(cache, name, "model.gguf")
        if not os.path.isfile(gguf):
            print(f"{name}: {gguf} is missing (run tests/real_models/fetch_real_models.py)")
            continue
        base = os.path.join(work, f"{name}.kld")
        out = perplexity(build, gguf, args.chunks, args.threads, "f32", base, kl=False)
        rows = {"f32": {"ppl": number(r"Final estimate: PPL = ([0-9.]+)", out)}}
        for fmt in FORMATS:
            out = perplexity(build, gguf, args.chunks, args.threads, fmt, base, kl=True)
            rows[fmt] = {
                "same_top": number(r"Same top p:\s+([0-9.]+)", out) / 100.0,
                "mean_kld": number(r"Mean\s+KLD:\s+([0-9.eE+-]+)", out),
                "ppl": number(r"Mean PPL\(Q\)\s+:\s+([0-9.]+)", out),
                "ppl_ratio": number(r"Mean PPL\(Q\)/PPL\(base\)\s+:\s+([0-9.]+)", out),
            }
        results[name] = rows
        print(f"{name} (llama.cpp, {args.chunks} x 512 tokens of {TEXT}); f32 cache perplexity "
              f"{rows['f32']['ppl']:.4f}")
        print("| KV format | same top token | mean KL | perplexity |")
        for fmt in FORMATS:
            r = rows[fmt]
            print(f"| {fmt} | {r['same_top']:.4f} | {r['mean_kld']:.5f} | {r['ppl']:.4f} "
                  f"({100 * (r['ppl_ratio'] - 1):+.2f}%) |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
