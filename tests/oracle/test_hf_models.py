"""kvserve's engine against Hugging Face transformers (the oracle no one here wrote).

Each test builds a small randomly initialised Llama / Qwen2 / Mistral model with
transformers, saves it with save_pretrained (safetensors), loads it with
kvserve's engine through the oracle driver, and checks:
  * the logits of all 64 prompt tokens agree with transformers' fp32 logits
    within 1e-4 relative error (max |kvserve - hf| / max |hf| per token row);
  * 32 greedy tokens are identical (transformers recomputes the whole
    sequence each step; kvserve decodes from its paged KV cache).
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
PROMPT_LEN = 64
GREEDY = 32
REL_TOL = 1e-4

COMMON = dict(
    vocab_size=384,
    hidden_size=96,
    intermediate_size=200,
    num_hidden_layers=3,
    num_attention_heads=6,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
    initializer_range=0.2,  # peaked distributions: no near-ties for greedy
    bos_token_id=1,
    eos_token_id=2,
)

CASES = {
    "llama3_rope_scaling_tied": (
        transformers.LlamaConfig,
        dict(rope_theta=500000.0, tie_word_embeddings=True, head_dim=32,
             rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                               high_freq_factor=4.0, original_max_position_embeddings=64)),
    ),
    "llama2_mha": (transformers.LlamaConfig, dict(num_key_value_heads=6, rope_theta=10000.0)),
    "llama_mqa_attention_bias": (
        transformers.LlamaConfig, dict(num_key_value_heads=1, attention_bias=True)),
    "qwen2_bias": (transformers.Qwen2Config, dict(rope_theta=1000000.0, tie_word_embeddings=False)),
    "mistral_sliding_window": (transformers.MistralConfig, dict(sliding_window=24, rope_theta=10000.0)),
}


def make_checkpoint(tmp_path, config_cls, overrides, seed):
    torch.manual_seed(seed)
    config = config_cls(**{**COMMON, **overrides})
    if config_cls is transformers.MistralConfig or config_cls is transformers.Qwen2Config:
        config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model = model.to(torch.float32).eval()
    with torch.no_grad():  # non-trivial norm weights and biases
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(tmp_path, safe_serialization=True)
    return model


def hf_reference(model, prompt):
    with torch.no_grad():
        ids = torch.tensor([prompt])
        logits = model(ids).logits[0].numpy()
        seq = list(prompt)
        greedy = []
        for _ in range(GREEDY):
            nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
            greedy.append(nxt)
            seq.append(nxt)
    return logits, greedy


def run_driver(model_dir, prompt, chunk, block_size):
    req = dict(prompt=prompt, greedy_tokens=GREEDY, block_size=block_size, chunk=chunk)
    res = subprocess.run([DRIVER, str(model_dir)], input=json.dumps(req), capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    return np.array(out["prompt_logits"], dtype=np.float64), out["greedy"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_and_greedy_match_transformers(tmp_path, case):
    config_cls, overrides = CASES[case]
    model = make_checkpoint(tmp_path, config_cls, overrides, seed=sorted(CASES).index(case))
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(3, COMMON["vocab_size"], PROMPT_LEN)]
    ref_logits, ref_greedy = hf_reference(model, prompt)

    for chunk, block_size in ((PROMPT_LEN, 16), (17, 8)):
        logits, greedy = run_driver(tmp_path, prompt, chunk, block_size)
        assert logits.shape == ref_logits.shape
        err = np.abs(logits - ref_logits).max(axis=1) / np.abs(ref_logits).max(axis=1)
        print(f"{case} chunk={chunk} block={block_size}: max relative error {err.max():.2e}")
        assert err.max() < REL_TOL, f"{case}: max relative error {err.max():.3g} (token {err.argmax()})"
        assert greedy == ref_greedy, f"{case}: greedy tokens differ"


def test_bf16_checkpoint_loads_as_its_fp32_values(tmp_path):
    """A bf16 checkpoint is converted exactly: it matches the same weights run in fp32."""
    model = make_checkpoint(tmp_path, transformers.LlamaConfig, {}, seed=42)
    model.to(torch.bfloat16).save_pretrained(tmp_path, safe_serialization=True)
    # The bf16 values, computed in fp32 (reloaded, so the rotary buffers are fresh fp32).
    model = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, dtype=torch.float32, attn_implementation="eager").eval()
    prompt = list(range(3, 3 + 40))
    ref_logits, ref_greedy = hf_reference(model, prompt)
    logits, greedy = run_driver(tmp_path, prompt, 40, 16)
    err = np.abs(logits - ref_logits).max(axis=1) / np.abs(ref_logits).max(axis=1)
    assert err.max() < REL_TOL
    assert greedy == ref_greedy


def test_sharded_checkpoint(tmp_path):
    model = make_checkpoint(tmp_path, transformers.Qwen2Config, {}, seed=7)
    model.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    prompt = list(range(10, 50))
    ref_logits, _ = hf_reference(model, prompt)
    logits, _ = run_driver(tmp_path, prompt, 40, 16)
    err = np.abs(logits - ref_logits).max(axis=1) / np.abs(ref_logits).max(axis=1)
    assert err.max() < REL_TOL


def test_unknown_architecture_is_a_clear_error(tmp_path):
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path, safe_serialization=True)
    res = subprocess.run([DRIVER, str(tmp_path)], input='{"prompt": [1, 2]}', capture_output=True,
                         text=True, timeout=60)
    assert res.returncode != 0
    assert "GPT2LMHeadModel" in res.stderr and "unsupported" in res.stderr.lower()


def test_llama2_tokenizer_layout_loads_end_to_end(tmp_path):
    """A Llama-2 layout directory (checkpoint + tokenizer.model + the
    tokenizer.json transformers converts it to + tokenizer_config.json) loads
    through engine::LoadModel, and kvserve's prompt ids equal AutoTokenizer's."""
    import sentencepiece as spm
    from test_tokenizers import corpus
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_prefix=str(tmp_path / "tokenizer"),
        model_type="bpe", vocab_size=COMMON["vocab_size"], byte_fallback=True,
        character_coverage=0.995, num_threads=1, minloglevel=2,
        normalization_rule_name="identity", remove_extra_whitespaces=False, split_digits=True)
    transformers.LlamaTokenizer.from_pretrained(str(tmp_path), add_bos_token=True).save_pretrained(
        str(tmp_path))
    make_checkpoint(tmp_path, transformers.LlamaConfig, {}, seed=3)
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    prompt = " Hello wörld  日本語 🤖</s>"
    want = tok.encode(prompt)
    assert want[0] == tok.bos_token_id and max(want) < COMMON["vocab_size"]
    req = dict(prompt_text=prompt, greedy_tokens=1)
    res = subprocess.run([DRIVER, str(tmp_path)], input=json.dumps(req), capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["prompt_ids"] == want
