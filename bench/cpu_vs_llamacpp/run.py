"""kvserve against llama.cpp on this CPU, at the same weight precision, on the
same checkpoint.

  .venv/bin/python bench/cpu_vs_llamacpp/run.py [--shapes smollm-135m,qwen2.5-0.5b]
      [--repeats 3] [--work DIR] [--llama_cpp_build DIR] [--out results.json]

What it does (nothing is written into the repository):
  1. builds llama.cpp from the llama-cpp-python source distribution on PyPI
     into a temporary directory (or reuses --llama_cpp_build);
  2. per shape, writes one random bf16 checkpoint (make_checkpoint.py) and
     converts it with llama.cpp's own convert_hf_to_gguf.py to BF16 and Q8_0;
  3. per repeat, interleaved so that both see the same machine state, per
     precision (kvserve 16-bit, fp32 arithmetic, and 16-bit-dot, bf16 dot
     products as llama.cpp's own, vs llama.cpp BF16; kvserve int8 and w8a8
     vs Q8_0, whose dot products also quantize the activations to int8):
       - batch-1 decode and 128-token prefill: llama-bench (pp128, tg128) vs
         the kvserve daemon driven by kvserve-loadgen at concurrency 1
         (128 in, 128 out: prefill = 128 / TTFT, decode = 1 / TPOT);
       - 32 concurrent x (128 in, 128 out): llama-batched-bench's generation
         throughput (32 x 128 / the time of its 128 decode steps, the prompt
         phase excluded) vs kvserve's generation throughput measured the same
         way: the output tokens all 32 requests received while all 32 were
         decoding (from the last request's first token to the first
         request's last token, client-side token times from kvserve-loadgen)
         over that window's length. Also printed: 32 / TPOT p50 (a request's
         TPOT also counts the steps that carried other requests' prefill
         chunks, so it understates the decode rate) and kvserve-loadgen's
         output tokens/s over the whole run (prefill included);
  4. prints the medians, the kvserve / llama.cpp ratios (of the medians, and
     the median of the per-repeat ratios);
  5. per repeat and program, the decode's share of the read ceiling: weight
     bytes per token (kvserve's host_weights_mb from its startup log, the
     GGUF file's size for llama.cpp, which holds the same tensors at the
     same precision plus a few MB of tokenizer) times decode tokens/s, over
     the mean of the memory's read bandwidth sampled just before and just
     after that program's decode (kvserve_memory_bench). The memory of this
     project's VM moves by up to 2x within seconds, so the decode ratio of
     one repeat can be a ratio of memory states; the ratio of the two shares
     divides that out. A share near 100% means that program's decode is at
     the memory's ceiling, where no kernel can be faster at that precision.
Threads: both use every core (--threads, default nproc).
KV cache: llama.cpp keeps K and V in f16 unless told otherwise (-ctk / -ctv,
not passed here), so kvserve gets --kv_cache_dtype=float16 too: the same
precision for the cache as for the weights. --kv_cache_dtype=auto gives
kvserve's CPU default (fp32), what this script ran before 2026-11-29.
"""
import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from llamacpp_peer import build_llama_cpp, llama_root  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
BUILD = os.environ.get("KVSERVE_BUILD_DIR", os.path.join(REPO, "build"))
KVSERVE = os.path.join(BUILD, "server", "kvserve")
LOADGEN = os.path.join(BUILD, "tools", "loadgen", "kvserve-loadgen")
MEMORY_BENCH = os.path.join(BUILD, "bench", "kvserve_memory_bench")
PY = sys.executable

# precision -> (kvserve flags, GGUF outtype)
PRECISIONS = {
    "16-bit": ([], "bf16"),
    "16-bit-dot": (["--matmul_precision=bfloat16"], "bf16"),
    "int8": (["--quantization=int8"], "q8_0"),
    "w8a8": (["--quantization=w8a8"], "q8_0"),
}
PROMPT, OUTPUT, BATCH = 128, 128, 32


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def make_ggufs(build, ckpt, work, shape):
    root = llama_root(build)
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "gguf-py"))
    out = {}
    for outtype in sorted({outtype for _, outtype in PRECISIONS.values()}):
        path = os.path.join(work, f"{shape}-{outtype}.gguf")
        if not os.path.exists(path):
            sh([PY, os.path.join(root, "convert_hf_to_gguf.py"), ckpt, "--outtype", outtype,
                "--outfile", path], env=env)
        out[outtype] = path
    return out


def read_gbps(threads):
    """The memory's read bandwidth now, GB/s (a second or two)."""
    out = sh([MEMORY_BENCH, f"--threads={threads}"])
    return float(re.search(r"read_gbps=([0-9.]+)", out).group(1))


def llama_bench(build, gguf, threads):
    """prefill tok/s, decode tok/s, and the read bandwidth around them."""
    before = read_gbps(threads)
    rows = json.loads(sh([os.path.join(build, "bin", "llama-bench"), "-m", gguf, "-p", str(PROMPT),
                          "-n", str(OUTPUT), "-t", str(threads), "-r", "1", "-o", "json"]))
    after = read_gbps(threads)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] == PROMPT and r["n_gen"] == 0)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] == OUTPUT and r["n_prompt"] == 0)
    return pp, tg, (before + after) / 2


def llama_batched(build, gguf, threads):
    text = sh([os.path.join(build, "bin", "llama-batched-bench"), "-m", gguf, "-c",
               str(BATCH * (PROMPT + OUTPUT) + 256), "-b", "2048", "-ub", "512", "-npp", str(PROMPT),
               "-ntg", str(OUTPUT), "-npl", str(BATCH), "-t", str(threads), "-tb", str(threads),
               "--output-format", "jsonl"])
    row = json.loads([l for l in text.splitlines() if l.startswith("{")][-1])
    return row["speed_tg"]


class Daemon:
    def __init__(self, ckpt, flags, log_prefix):
        self.stderr = open(log_prefix + ".stderr", "w")
        self.proc = subprocess.Popen(
            [KVSERVE, "--host=127.0.0.1", "--port=0", "--metrics_host=127.0.0.1", "--metrics_port=0",
             f"--model={ckpt}", "--log_requests=false", f"--max_model_len={PROMPT + OUTPUT + 16}",
             *flags], stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        for line in self.proc.stdout:
            if line.startswith("kvserve ready"):
                self.grpc = re.search(r"grpc=(\S+)", line).group(1)
                self.metrics = "http://" + re.search(r"metrics=(\S+)", line).group(1) + "/metrics"
                return
        raise RuntimeError(f"kvserve did not start; see {log_prefix}.stderr")

    def weight_bytes(self):
        """The weights' bytes, from the startup log (MiB)."""
        with open(self.stderr.name) as f:
            return float(re.search(r"host_weights_mb=([0-9.]+)", f.read()).group(1)) * (1 << 20)

    def loadgen(self, out_json, concurrency, num_requests):
        subprocess.run([LOADGEN, f"--address={self.grpc}", f"--concurrency={concurrency}",
                        f"--num_requests={num_requests}", f"--prompt_len={PROMPT}",
                        f"--output_len={OUTPUT}", "--seed=1", f"--output_json={out_json}"],
                       check=True, capture_output=True)
        return json.load(open(out_json))["phases"][0]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.stderr.close()


def all_decoding_rate(phase):
    """Output tokens/s while every request of the phase was decoding: from the
    last first token to the first last token, counting each request's tokens
    received inside that window (client-side times)."""
    times = [[r["send_s"] + t / 1e3 for t in r["token_times_ms"]]
             for r in phase["requests"] if r["num_tokens"] > 0]
    start = max(t[0] for t in times)
    end = min(t[-1] for t in times)
    if end <= start:
        raise RuntimeError("no window in which every request was decoding")
    return sum(1 for t in times for x in t if start < x <= end) / (end - start)


def kvserve_runs(ckpt, flags, prefix, threads):
    d = Daemon(ckpt, flags, prefix)
    try:
        d.loadgen(prefix + "-warmup.json", 1, 1)
        before = read_gbps(threads)  # the daemon is idle while this reads
        single = d.loadgen(prefix + "-c1.json", 1, 3)
        after = read_gbps(threads)
        batched = d.loadgen(prefix + "-c32.json", BATCH, BATCH)
        weight_bytes = d.weight_bytes()
    finally:
        d.stop()
    if single["num_failed"] or batched["num_failed"]:
        raise RuntimeError(f"kvserve requests failed; see {prefix}-*.json")
    return (PROMPT / (single["ttft_ms"]["p50"] / 1e3), 1e3 / single["tpot_ms"]["p50"],
            all_decoding_rate(batched), BATCH * 1e3 / batched["tpot_ms"]["p50"],
            batched["output_token_throughput"], (before + after) / 2, weight_bytes)


def rss_mb(ckpt, flags):
    """Resident memory of an idle daemon with the model loaded."""
    d = Daemon(ckpt, flags, os.path.join(tempfile.gettempdir(), "kvserve-rss"))
    try:
        time.sleep(1)
        with open(f"/proc/{d.proc.pid}/status") as f:
            return int(next(l for l in f if l.startswith("VmRSS")).split()[1]) / 1024
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="smollm-135m,qwen2.5-0.5b")
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--work", default=None, help="scratch dir (default: a new temporary one)")
    ap.add_argument("--llama_cpp_build", default=None, help="an existing llama.cpp build dir")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--kv_cache_dtype", default="float16",
                    help="kvserve's --kv_cache_dtype (float16: llama.cpp's own default)")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="kvserve-vs-llamacpp-")
    build = args.llama_cpp_build or build_llama_cpp(work, ["llama-bench", "llama-batched-bench"])
    results = {}
    for shape in args.shapes.split(","):
        ckpt = os.path.join(work, shape)
        if not os.path.exists(os.path.join(ckpt, "model.safetensors")):
            sh([PY, os.path.join(os.path.dirname(__file__), "make_checkpoint.py"), "--shape", shape,
                "--out", ckpt])
        ggufs = make_ggufs(build, ckpt, work, shape)
        for precision in args.precisions.split(","):
            flags, outtype = PRECISIONS[precision]
            flags = [*flags, f"--kv_cache_dtype={args.kv_cache_dtype}"]
            runs = {k: [] for k in ("kv_prefill", "kv_decode", "kv_batched", "kv_batched_tpot",
                                    "kv_batched_whole_run", "ll_prefill", "ll_decode",
                                    "ll_batched", "kv_read_gbps", "ll_read_gbps",
                                    "kv_decode_of_read", "ll_decode_of_read")}
            gguf_bytes = os.path.getsize(ggufs[outtype])
            for r in range(args.repeats):
                pp, tg, ll_read = llama_bench(build, ggufs[outtype], args.threads)
                kp, kd, kb, kt, kw, kv_read, kv_bytes = kvserve_runs(
                    ckpt, flags, os.path.join(work, f"{shape}-{precision}-{r}"), args.threads)
                lb = llama_batched(build, ggufs[outtype], args.threads)
                for k, v in zip(runs, (kp, kd, kb, kt, kw, pp, tg, lb, kv_read, ll_read,
                                       kd * kv_bytes / (kv_read * 1e9),
                                       tg * gguf_bytes / (ll_read * 1e9))):
                    runs[k].append(v)
            med = {k: statistics.median(v) for k, v in runs.items()}
            med["rss_mb"] = rss_mb(ckpt, flags)
            results[f"{shape} {precision}"] = dict(median=med, runs=runs, gguf=outtype,
                                                   kv_cache_dtype=args.kv_cache_dtype)
            print(f"{shape} {precision} (vs llama.cpp {outtype.upper()}; kvserve KV cache "
                  f"{args.kv_cache_dtype}, llama.cpp's f16), median of {args.repeats}:")
            for what in ("prefill", "decode", "batched"):
                k, l = med["kv_" + what], med["ll_" + what]
                # Each repeat runs both programs back to back, so its ratio
                # pairs measurements taken under the same machine state.
                paired = [a / b for a, b in zip(runs["kv_" + what], runs["ll_" + what])]
                med["ratio_" + what] = statistics.median(paired)
                print(f"  {what:8s} kvserve {k:8.1f} tok/s  llama.cpp {l:8.1f} tok/s  ratio {k / l:.2f}x"
                      f"  (per repeat {' / '.join(f'{x:.2f}' for x in paired)},"
                      f" median {med['ratio_' + what]:.2f}x)")
            shares = [a / b for a, b in zip(runs["kv_decode_of_read"], runs["ll_decode_of_read"])]
            med["ratio_decode_of_read"] = statistics.median(shares)
            print("  decode bytes/s over the read bandwidth around it, per repeat (that"
                  " bandwidth in GB/s):")
            for who, key in (("kvserve", "kv"), ("llama.cpp", "ll")):
                print(f"    {who:9s} " + " / ".join(
                    f"{x:.0%} ({g:.1f})"
                    for x, g in zip(runs[key + "_decode_of_read"], runs[key + "_read_gbps"])))
            print(f"    ratio     {' / '.join(f'{x:.2f}' for x in shares)},"
                  f" median {med['ratio_decode_of_read']:.2f}x")
            print(f"  kvserve batched 32 / TPOT p50: {med['kv_batched_tpot']:.1f} tok/s; output tok/s"
                  f" over the whole run (prefill included): {med['kv_batched_whole_run']:.1f}")
            print(f"  kvserve RSS (idle, model loaded): {med['rss_mb']:.0f} MiB")
            sys.stdout.flush()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
