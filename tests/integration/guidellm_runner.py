"""GuideLLM (a load tester from PyPI, pinned in tests/oracle/requirements.txt)
against kvserve's OpenAI HTTP API, shared by tests/integration/test_guidellm.py
and bench/http_vs_grpc/load_testers.py.

GuideLLM makes synthetic prompts of an exact token count with the served
model's own Hugging Face tokenizer, so it needs a checkpoint directory with
one: `make_checkpoint` writes a small random Llama with a byte-level BPE
tokenizer (no chat template: GuideLLM is pointed at /v1/completions).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

GUIDELLM = Path(sys.executable).with_name("guidellm")


def make_checkpoint(path: Path, hidden: int = 64, layers: int = 2) -> Path:
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog, hello world"] * 20,
                            trainer)
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>",
                                              eos_token="</s>")
    hf.save_pretrained(str(path))
    torch.manual_seed(3)
    config = transformers.LlamaConfig(
        vocab_size=len(hf), hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=1024, bos_token_id=0, eos_token_id=1)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.to(torch.float32).eval().save_pretrained(str(path), safe_serialization=True)
    return path


def run_guidellm(http_url: str, tokenizer_dir: Path, out_json: Path, *, concurrency: int,
                 num_requests: int, prompt_tokens: int, output_tokens: int,
                 timeout: float = 600) -> dict:
    """One GuideLLM benchmark at fixed concurrency; returns its JSON report's
    first benchmark (requests by status, metrics)."""
    cmd = [str(GUIDELLM), "run",
           "--backend", f"kind=openai_http,target={http_url},request_format=/v1/completions",
           "--profile", f"kind=concurrent,streams={concurrency}",
           "--constraint", f"kind=max_requests,count={num_requests}",
           "--data", f"kind=synthetic_text,prompt_tokens={prompt_tokens},"
                     f"output_tokens={output_tokens}",
           "--tokenizer", f"kind=hf_auto,model={tokenizer_dir}",
           "--output", f"kind=json,path={out_json}",
           "--disable-console-interactive", "--disable-progress"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"guidellm exited {res.returncode}\n{res.stdout[-3000:]}\n"
                           f"{res.stderr[-3000:]}")
    return json.loads(out_json.read_text())["benchmarks"][0]


def summary(benchmark: dict) -> dict:
    """Counts and latency medians from one GuideLLM benchmark."""
    reqs = benchmark["requests"]
    ok = reqs["successful"]
    m = benchmark["metrics"]

    def median(name):
        return m[name]["successful"]["median"]

    return dict(successful=len(ok), errored=len(reqs["errored"]),
                incomplete=len(reqs["incomplete"]),
                prompt_tokens=sum(r["prompt_tokens"] for r in ok),
                output_tokens=sum(r["output_tokens"] for r in ok),
                ttft_ms_p50=median("time_to_first_token_ms"),
                itl_ms_p50=median("inter_token_latency_ms"),
                tpot_ms_p50=median("time_per_output_token_ms"))
