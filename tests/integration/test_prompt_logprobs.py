"""Prompt logprobs through the daemon, against transformers' log_softmax of the same prompt.

A small randomly initialised Llama checkpoint (fp32, saved by transformers) is served on the
cpu backend; every prompt token after the first must carry transformers' log-probability
within 1e-4, through every path a client takes:
  * /v1/completions with echo + logprobs (lm-eval's loglikelihood request: max_tokens 0 and
    1, token-id prompts), streaming and not: the first token null, the prompt's tokens
    before the completion's, the top entries ranked as transformers ranks them;
  * vLLM's prompt_logprobs on /v1/completions (token id -> logprob, rank, decoded_token; chat's
    is checked on a real model with its tokenizer, tests/real_models/test_lm_eval_real.py);
  * the gRPC API's prompt_logprobs (GenerateResponse.prompt_logprobs, in the message with the
    first token).
A repeated prompt (whose blocks are in the prefix cache) is recomputed, not served from the
cache, and scores the same; errors name the field.
"""

from __future__ import annotations

import json
import os

import numpy as np
import openai
import pytest
import torch
import transformers

import kvserve_fixtures as kf

os.environ["NO_PROXY"] = "127.0.0.1,localhost"
os.environ["no_proxy"] = "127.0.0.1,localhost"

ABS_TOL = 1e-4
VOCAB = 384
MODEL = "tiny-llama"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama")
    torch.manual_seed(3)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=96, intermediate_size=200, num_hidden_layers=3,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=512,
        rms_norm_eps=1e-5, initializer_range=0.2, bos_token_id=1, eos_token_id=2,
        rope_theta=10000.0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model = model.to(torch.float32).eval()
    model.save_pretrained(path, safe_serialization=True)
    return path, model


@pytest.fixture(scope="module")
def daemon(kvserve_module_factory, checkpoint):
    path, _ = checkpoint
    # A block size of 16 and a budget of 32: the 40-token prompts below are prefilled in
    # chunks, and their full blocks enter the prefix cache.
    return kvserve_module_factory("--http_port=-1", f"--served_model_name={MODEL}",
                                  "--block_size=16",
                                  "--max_num_batched_tokens=32", model=str(path))


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.http_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def prompt_ids(seed: int, n: int = 40) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(3, VOCAB, size=n)]


def hf_logprobs(model, ids: list[int]) -> np.ndarray:
    """[len(ids) - 1, vocab]: row i is log p(. | ids[:i + 1]), in float64."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    return torch.log_softmax(logits, dim=-1)[:-1].numpy()


def check_against(hf: np.ndarray, ids: list[int], scored: list[float]) -> None:
    assert len(scored) == len(ids) - 1
    want = [hf[i, ids[i + 1]] for i in range(len(ids) - 1)]
    np.testing.assert_allclose(scored, want, rtol=0, atol=ABS_TOL)


def raw_completion(daemon: kf.Daemon, body: dict) -> dict:
    import http.client
    host, port = daemon.http_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps({"model": MODEL, **body}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return {"status": resp.status, "body": json.loads(resp.read())}
    finally:
        conn.close()


@pytest.mark.parametrize("max_tokens", [0, 1])
def test_echo_logprobs_are_transformers_log_softmax(daemon, client, checkpoint, max_tokens):
    _, model = checkpoint
    ids = prompt_ids(max_tokens)
    hf = hf_logprobs(model, ids)
    out = client.completions.create(model=MODEL, prompt=ids, max_tokens=max_tokens,
                                    temperature=0, echo=True, logprobs=1)
    choice = out.choices[0]
    lp = choice.logprobs
    assert len(lp.token_logprobs) == len(ids) + max_tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    check_against(hf, ids, lp.token_logprobs[1:len(ids)])
    assert choice.finish_reason == "length"
    assert out.usage.completion_tokens == max_tokens
    if max_tokens == 1:  # the sampled token's logprob follows the prompt's
        with torch.no_grad():
            last = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].double(), -1)
        assert abs(lp.token_logprobs[-1] - float(last.max())) < ABS_TOL
    # The top entry of every scored prompt token is transformers' most likely token (lm-eval's
    # is_greedy compares it with the token's own). (Keyed by token text, which this
    # tokenizer-less checkpoint does not have: one entry keeps the dict unambiguous.)
    for i in range(1, len(ids)):
        (top,) = lp.top_logprobs[i].values()
        assert abs(top - hf[i - 1].max()) < ABS_TOL
    assert out.usage.prompt_tokens_details.cached_tokens == 0


def test_vllm_prompt_logprobs(daemon, client, checkpoint):
    _, model = checkpoint
    ids = prompt_ids(7)
    hf = hf_logprobs(model, ids)
    r = raw_completion(daemon, {"prompt": ids, "max_tokens": 2, "temperature": 0,
                                "prompt_logprobs": 2})
    assert r["status"] == 200, r
    scored = r["body"]["choices"][0]["prompt_logprobs"]
    assert scored[0] is None and len(scored) == len(ids)
    values = []
    for i in range(1, len(ids)):
        entry = scored[i]
        own = entry[str(ids[i])]
        values.append(own["logprob"])
        # The rank transformers gives the token (ties are measure-zero with random weights).
        assert own["rank"] == 1 + int((hf[i - 1] > hf[i - 1, ids[i]]).sum())
        # The top two, ranks 1 and 2, beside the token itself (one entry when it is one of them).
        assert {e["rank"] for e in entry.values()} == {1, 2, own["rank"]}
    check_against(hf, ids, values)


def test_streamed_echo_carries_the_prompt_logprobs_first(daemon, client, checkpoint):
    _, model = checkpoint
    ids = prompt_ids(11)
    hf = hf_logprobs(model, ids)
    chunks = list(client.completions.create(model=MODEL, prompt=ids, max_tokens=3,
                                            temperature=0, echo=True, logprobs=1, stream=True))
    first = chunks[0].choices[0]
    assert first.logprobs.token_logprobs[0] is None
    check_against(hf, ids, first.logprobs.token_logprobs[1:])
    completion = [t for c in chunks[1:] if c.choices and c.choices[0].logprobs
                  for t in c.choices[0].logprobs.token_logprobs]
    assert len(completion) == 3
    whole = client.completions.create(model=MODEL, prompt=ids, max_tokens=3, temperature=0,
                                      echo=True, logprobs=1)
    assert whole.choices[0].logprobs.token_logprobs[1:] == \
        first.logprobs.token_logprobs[1:] + completion
    offsets = first.logprobs.text_offset
    assert offsets == sorted(offsets)


def test_cached_prompt_is_recomputed_and_scores_the_same(daemon, client, checkpoint):
    ids = prompt_ids(5, n=48)
    plain = client.completions.create(model=MODEL, prompt=ids, max_tokens=1, temperature=0)
    again = client.completions.create(model=MODEL, prompt=ids, max_tokens=1, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens == 32  # two full blocks
    a = client.completions.create(model=MODEL, prompt=ids, max_tokens=1, temperature=0,
                                  echo=True, logprobs=0)
    b = client.completions.create(model=MODEL, prompt=ids, max_tokens=1, temperature=0,
                                  echo=True, logprobs=0)
    assert a.usage.prompt_tokens_details.cached_tokens == 0
    assert b.usage.prompt_tokens_details.cached_tokens == 0
    assert a.choices[0].logprobs.token_logprobs == b.choices[0].logprobs.token_logprobs
    assert a.choices[0].text == plain.choices[0].text


def test_grpc_prompt_logprobs(daemon, checkpoint):
    _, model = checkpoint
    ids = prompt_ids(13)
    hf = hf_logprobs(model, ids)
    result = kf.stream(daemon.stub, kf.ids_request(ids, 2, prompt_logprobs=2)).check_ok()
    carrying = [r for r in result.responses if r.prompt_logprobs]
    assert len(carrying) == 1 and carrying[0].token_ids  # with the first token
    scored = list(carrying[0].prompt_logprobs)
    assert [s.token_id for s in scored] == ids[1:]
    check_against(hf, ids, [s.logprob for s in scored])
    for i, s in enumerate(scored):
        assert s.rank == 1 + int((hf[i] > hf[i, ids[i + 1]]).sum())
        assert len(s.top) == 2 and s.top[0].logprob >= s.top[1].logprob
    # max_tokens 0: scored only; the final message carries them and no token.
    only = kf.stream(daemon.stub, kf.ids_request(ids, 0, prompt_logprobs=0)).check_ok()
    assert only.token_ids == [] and len(only.final.prompt_logprobs) == len(ids) - 1
    pb2, _ = kf.pb()
    assert only.final.finish_reason == pb2.FINISH_REASON_LENGTH


@pytest.mark.parametrize("body,param", [
    ({"prompt": [5, 6], "prompt_logprobs": 21}, "prompt_logprobs"),
    ({"prompt": [5, 6], "prompt_logprobs": "yes"}, "prompt_logprobs"),
    ({"prompt": [5, 6], "max_tokens": -1}, "max_tokens"),
    ({"prompt": [5, 6], "echo": True, "logprobs": 21}, "logprobs"),
])
def test_bad_prompt_logprobs_requests_name_the_field(daemon, body, param):
    r = raw_completion(daemon, body)
    assert r["status"] == 400, r
    assert r["body"]["error"]["param"] == param, r
