"""A Llama-2-layout checkpoint, as Hub repositories ship it, served by the daemon.

The directory holds what a Llama 2 / TinyLlama repository holds: a random-weight
LlamaForCausalLM saved with `save_pretrained`, a SentencePiece BPE model with
byte fallback trained here (tokenizer.model), the tokenizer.json and
tokenizer_config.json that transformers writes for it, and a
generation_config.json. Through the daemon: it starts, Tokenize equals
`AutoTokenizer` (byte fallback for text outside the vocabulary), and a text
Generate runs greedy to exactly transformers' `generate()` tokens and text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import sentencepiece as spm
import torch
import transformers

import kvserve_fixtures as kf
from kvserve_fixtures import stream, text_request

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
from test_tokenizers import corpus  # noqa: E402  (the oracle's training text)

pb2, _ = kf.pb()
VOCAB = 384
PROMPT = "Hello wörld, 日本語 🤖 the  café"
MAX_NEW = 16


@pytest.fixture(scope="module")
def llama2_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama2")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_prefix=str(path / "tokenizer"), model_type="bpe",
        vocab_size=VOCAB, byte_fallback=True, character_coverage=0.995, num_threads=1,
        minloglevel=2, normalization_rule_name="identity", remove_extra_whitespaces=False,
        split_digits=True)
    transformers.LlamaTokenizer.from_pretrained(str(path), add_bos_token=True).save_pretrained(
        str(path))
    assert (path / "tokenizer.json").exists() and (path / "tokenizer.model").exists()
    torch.manual_seed(5)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
        initializer_range=0.2, bos_token_id=1, eos_token_id=2)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model.to(torch.float32).eval().save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="module")
def daemon(kvserve_module_factory, llama2_dir):
    return kvserve_module_factory(model=str(llama2_dir))


def test_tokenize_equals_autotokenizer(daemon, llama2_dir):
    tok = transformers.AutoTokenizer.from_pretrained(str(llama2_dir))
    for text in (PROMPT, " leading space", "emoji only 🎉🎉", "ends</s>"):
        want = tok.encode(text)
        got = daemon.stub.Tokenize(pb2.TokenizeRequest(text=text))
        assert list(got.token_ids) == want, text
        back = daemon.stub.Detokenize(pb2.DetokenizeRequest(token_ids=want,
                                                            skip_special_tokens=True))
        assert back.text == tok.decode(want, skip_special_tokens=True), text


def test_text_generate_equals_transformers(daemon, llama2_dir):
    tok = transformers.AutoTokenizer.from_pretrained(str(llama2_dir))
    model = transformers.AutoModelForCausalLM.from_pretrained(
        llama2_dir, dtype=torch.float32, attn_implementation="eager").eval()
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, do_sample=False, max_new_tokens=MAX_NEW, pad_token_id=0)
    want = [int(t) for t in out[0, ids.shape[1]:]]
    result = stream(daemon.stub, text_request(PROMPT, MAX_NEW, temperature=0.0)).check_ok()
    assert result.final.usage.prompt_tokens == ids.shape[1]
    assert result.token_ids == want, result
    assert result.text == tok.decode(want, skip_special_tokens=True)
    stopped_at_eos = bool(want) and want[-1] == 2
    assert result.final.finish_reason == (pb2.FINISH_REASON_STOP if stopped_at_eos
                                          else pb2.FINISH_REASON_LENGTH)
