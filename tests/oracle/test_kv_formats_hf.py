"""Each KV cache format against the full-precision cache, on checkpoints
transformers writes, over text the model itself wrote.

For each architecture a randomly initialised model is saved by transformers
(safetensors), and 2,048 tokens are sampled from it with transformers
(temperature 1): the teacher text is the model's own, so the teacher tokens sit
where the model puts its probability mass, as real text does for a trained
model (random tokens would sit in the tails, where log-probabilities move
most). kvserve then teacher-forces the sequence (chunks of 512, so every
position attends to keys read back from the cache) once per --kv_cache_dtype
and reports, against kvserve's fp32 cache:
  top-1 agreement, KL(p_fp32 || p_format) mean / max (nats),
  |delta log p(teacher token)| mean / max;
and checks that kvserve's fp32 cache itself matches transformers' fp32 logits.
The measured table is in docs/engine.md ("KV cache formats"); BOUNDS says
how the limits were set.
"""
import json
import os
import subprocess

import numpy as np
import pytest
import torch
import transformers

BUILD_DIR = os.environ.get("KVSERVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
DRIVER = os.path.join(BUILD_DIR, "tests", "kvserve_logits_driver")
TOKENS = 2048
CHUNK = 512

COMMON = dict(
    vocab_size=512,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=64,  # the head dim of most served models
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    initializer_range=0.1,
    bos_token_id=1,
    eos_token_id=2,
)

ARCHS = {
    "llama_gqa": (transformers.LlamaConfig, dict(rope_theta=500000.0, tie_word_embeddings=True)),
    "qwen3_qk_norm": (transformers.Qwen3Config, dict(rope_theta=1000000.0)),
}

# Bounds from the figures measured on both architectures (docs/engine.md): the
# error figures at 2.5x the worse architecture's, top-1 agreement with twice its
# disagreement (half its agreement for the 4-bit formats), so a regression in
# a codec or in the attention's dequantize fails; everything is seeded, so
# nothing else moves them.
# (top-1 agreement >=, mean KL <=, max KL <=, mean |dlogp| <=, max |dlogp| <=,
#  perplexity increase <=)
BOUNDS = {
    "float16": (0.995, 1e-5, 1e-4, 5e-3, 3e-2, 1e-4),
    "bfloat16": (0.96, 4e-4, 3e-3, 4e-2, 2e-1, 2e-3),
    "int8": (0.89, 5e-3, 4e-2, 2e-1, 9e-1, 7e-3),
    "fp8_e4m3": (0.5, 9e-2, 6e-1, 5e-1, 3.0, 7e-2),
    "int4": (0.15, 1.0, 3.0, 2.0, 10.0, 1.25),
    "fp4_e2m1": (0.15, 1.1, 5.0, 2.1, 10.0, 1.5),
}
REL_TOL_FP32 = 1e-4  # kvserve fp32 cache vs transformers fp32, as test_hf_models.py


def make_model(tmp_path, config_cls, overrides, seed):
    torch.manual_seed(seed)
    config = config_cls(**{**COMMON, **overrides})
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model = model.to(torch.float32).eval()
    with torch.no_grad():  # non-trivial norm weights
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(tmp_path, safe_serialization=True)
    return model


def sample_text(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(torch.tensor([[COMMON["bos_token_id"]]]), do_sample=True, temperature=1.0,
                             top_k=0, top_p=1.0, max_new_tokens=TOKENS - 1, min_new_tokens=TOKENS - 1,
                             pad_token_id=0)
    return [int(t) for t in out[0]]


def kvserve_logits(model_dir, tokens, kv_cache_dtype):
    req = dict(prompt=tokens, block_size=16, chunk=CHUNK, kv_cache_dtype=kv_cache_dtype)
    res = subprocess.run([DRIVER, str(model_dir)], input=json.dumps(req), capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return np.array(json.loads(res.stdout)["prompt_logits"], dtype=np.float64)


def log_softmax(logits):
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def compare(ref_logits, logits, tokens):
    """Metrics over the TOKENS - 1 next-token predictions."""
    ref_lp = log_softmax(ref_logits[:-1])
    lp = log_softmax(logits[:-1])
    nxt = np.array(tokens[1:])
    rows = np.arange(len(nxt))
    kl = (np.exp(ref_lp) * (ref_lp - lp)).sum(axis=1)
    dlogp = np.abs(ref_lp[rows, nxt] - lp[rows, nxt])
    top1 = float((ref_lp.argmax(axis=1) == lp.argmax(axis=1)).mean())
    # Perplexity of the teacher text relative to the fp32 cache's, minus 1.
    ppl_increase = float(np.exp((ref_lp[rows, nxt] - lp[rows, nxt]).mean()) - 1)
    return top1, float(kl.mean()), float(kl.max()), float(dlogp.mean()), float(dlogp.max()), ppl_increase


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_each_kv_format_against_the_full_precision_cache(tmp_path, arch):
    config_cls, overrides = ARCHS[arch]
    model = make_model(tmp_path, config_cls, overrides, seed=sorted(ARCHS).index(arch))
    tokens = sample_text(model, seed=7)
    assert len(tokens) == TOKENS

    full = kvserve_logits(tmp_path, tokens, "auto")
    with torch.no_grad():
        hf = model(torch.tensor([tokens])).logits[0].double().numpy()
    rel = np.abs(full - hf).max(axis=1) / np.abs(hf).max(axis=1)
    lp = log_softmax(full)
    print(f"{arch}: fp32 vs hf max rel {rel.max():.2e}; mean entropy {-(np.exp(lp) * lp).sum(axis=1).mean():.3f} nats; "
          f"mean p(top1) {np.exp(lp.max(axis=1)).mean():.3f}")
    assert rel.max() < REL_TOL_FP32, f"fp32 cache vs transformers: max rel err {rel.max():.2e}"

    failures = []
    for fmt, bounds in BOUNDS.items():
        got = compare(full, kvserve_logits(tmp_path, tokens, fmt), tokens)
        print(f"{arch} {fmt}: top1 {got[0]:.4f} meanKL {got[1]:.2e} maxKL {got[2]:.2e} "
              f"mean|dlogp| {got[3]:.2e} max|dlogp| {got[4]:.2e} ppl {got[5]:+.2e}")
        if got[0] < bounds[0] or any(g > b for g, b in zip(got[1:], bounds[1:])):
            failures.append(f"{fmt}: {got} outside {bounds}")
    assert not failures, "\n".join(failures)
