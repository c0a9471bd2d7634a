"""OpenAI / vLLM request extensions through the daemon (issue 55), by the openai SDK and gRPC:
  * logit_bias: +100 forces a token, -100 bans it, greedy and seeded, streaming and not,
    /v1/completions, /v1/chat/completions and gRPC's SamplingParams.logit_bias, the same tokens
    through both APIs; an id outside the vocabulary is a 400 / INVALID_ARGUMENT naming it;
  * --served_model_name (comma-separated and repeated): /v1/models, GET /v1/models/{id},
    GetModelInfo.served_model_names, a request's "model" must be one of them (404
    model_not_found otherwise);
  * /v1/completions/render and /v1/chat/completions/render: the prompt ids (those of /tokenize,
    of transformers, and of the generation's usage) in vLLM's shape, without generating;
  * continue_final_message: the final assistant message left open, exactly transformers' ids;
    a 400 with add_generation_prompt, or when the last message is not the assistant's.
"""

from __future__ import annotations

import grpc
import openai
import pytest

import kvserve_fixtures as kf
from kvserve_fixtures import stream, text_request
from test_openai_http import (MESSAGES, PROMPT, TINY, assert_error, chat_dir,  # noqa: F401
                              client_for, get, post)

pb2, _ = kf.pb()

Z = ord("z")  # builtin:tiny's byte tokenizer: ids 0-255 are the bytes
MODES = [pytest.param(0.0, None, id="greedy"), pytest.param(1.0, 11, id="seeded")]


@pytest.fixture(scope="module")
def daemon(kvserve_module_factory):
    d = kvserve_module_factory("--http_port=-1")
    assert d.http_url, d.stdout_text()
    return d


@pytest.fixture(scope="module")
def chat_daemon(kvserve_module_factory, chat_dir):  # noqa: F811
    return kvserve_module_factory("--http_port=-1", model=str(chat_dir[0]))


def grpc_tokens(d, request, bias: dict[int, float], *, seed, temperature) -> list[int]:
    request.sampling.temperature = temperature
    request.sampling.seed = seed or 0
    for token, b in bias.items():
        request.sampling.logit_bias[token] = b
    return stream(d.stub, request).check_ok().token_ids


def completion_text(client, bias, *, seed, temperature, stream_it, max_tokens=12, extra=None):
    out = client.completions.create(
        model=TINY, prompt=PROMPT, max_tokens=max_tokens, temperature=temperature, seed=seed,
        logit_bias=bias, stream=stream_it, extra_body={"ignore_eos": True, **(extra or {})})
    if stream_it:
        return "".join(c.choices[0].text for c in out if c.choices)
    return out.choices[0].text


@pytest.mark.parametrize("temperature,seed", MODES)
@pytest.mark.parametrize("stream_it", [False, True], ids=["whole", "stream"])
def test_completions_plus_100_forces_a_token(daemon, temperature, seed, stream_it):
    client = client_for(daemon)
    for extra in ({}, {"top_p": 0.8}, {"top_k": 5}, {"min_p": 0.1}):
        text = completion_text(client, {str(Z): 100}, seed=seed, temperature=temperature,
                               stream_it=stream_it, extra=extra)
        assert text == "z" * 12, (extra, text)
    ids = grpc_tokens(daemon, text_request(PROMPT, 12, ignore_eos=True), {Z: 100.0},
                      seed=seed, temperature=temperature)
    assert ids == [Z] * 12


@pytest.mark.parametrize("temperature,seed", MODES)
@pytest.mark.parametrize("stream_it", [False, True], ids=["whole", "stream"])
def test_completions_minus_100_bans_tokens(daemon, temperature, seed, stream_it):
    client = client_for(daemon)
    req = lambda: text_request(PROMPT, 24, ignore_eos=True)  # noqa: E731
    free = grpc_tokens(daemon, req(), {}, seed=seed, temperature=temperature)
    banned = sorted(set(free))[:8]  # the tokens it chose unbiased, up to 8 of them
    assert banned
    bias = {t: -100.0 for t in banned}
    ids = grpc_tokens(daemon, req(), bias, seed=seed, temperature=temperature)
    assert len(ids) == 24 and not set(ids) & set(banned), (banned, ids)
    # The HTTP API draws the same tokens from the same request.
    want = daemon.stub.Detokenize(pb2.DetokenizeRequest(token_ids=ids)).text
    got = completion_text(client, {str(t): -100 for t in banned}, seed=seed,
                          temperature=temperature, stream_it=stream_it, max_tokens=24)
    assert got == want


@pytest.mark.parametrize("temperature,seed", MODES)
@pytest.mark.parametrize("stream_it", [False, True], ids=["whole", "stream"])
def test_chat_logit_bias_forces_and_bans(chat_daemon, chat_dir, temperature, seed,  # noqa: F811
                                         stream_it):
    path, hf = chat_dir
    client = client_for(chat_daemon)
    forced = hf.encode(" Paris", add_special_tokens=False)[0]
    detokenize = lambda ids: chat_daemon.stub.Detokenize(  # noqa: E731
        pb2.DetokenizeRequest(token_ids=ids)).text
    out = client.chat.completions.create(
        model=str(path), messages=MESSAGES, max_tokens=6, temperature=temperature, seed=seed,
        logit_bias={str(forced): 100}, stream=stream_it, extra_body={"ignore_eos": True})
    content = ("".join(c.choices[0].delta.content or "" for c in out if c.choices)
               if stream_it else out.choices[0].message.content)
    assert content == detokenize([forced] * 6)
    # Banned: the gRPC request of the same prompt ids with the same bias and
    # seed draws none of them, and the same tokens as the chat request.
    ids = post(chat_daemon, "/tokenize", {"messages": MESSAGES}).json()["tokens"]
    free = grpc_tokens(chat_daemon, kf.ids_request(ids, 10, ignore_eos=True), {},
                       seed=seed, temperature=temperature)
    bias = {t: -100.0 for t in set(free)}
    biased = grpc_tokens(chat_daemon, kf.ids_request(ids, 10, ignore_eos=True), bias,
                         seed=seed, temperature=temperature)
    assert not set(biased) & set(free), (free, biased)
    out = client.chat.completions.create(
        model=str(path), messages=MESSAGES, max_tokens=10, temperature=temperature, seed=seed,
        logit_bias={str(t): -100 for t in bias}, stream=stream_it,
        extra_body={"ignore_eos": True})
    content = ("".join(c.choices[0].delta.content or "" for c in out if c.choices)
               if stream_it else out.choices[0].message.content)
    assert content == detokenize(biased)


def test_logit_bias_outside_the_vocabulary_is_400_naming_it(daemon, chat_daemon,
                                                            chat_dir):  # noqa: F811
    vocab = daemon.model_info().vocab_size
    with pytest.raises(openai.BadRequestError) as e:
        client_for(daemon).completions.create(model=TINY, prompt=PROMPT, max_tokens=2,
                                              logit_bias={str(vocab): 5})
    assert e.value.body["param"] == "logit_bias"
    assert f"token id {vocab} outside the vocabulary" in e.value.body["message"]
    chat_vocab = chat_daemon.model_info().vocab_size
    with pytest.raises(openai.BadRequestError) as e:
        client_for(chat_daemon).chat.completions.create(
            model=str(chat_dir[0]), messages=MESSAGES, max_tokens=2,
            logit_bias={str(chat_vocab + 7): -5})
    assert f"token id {chat_vocab + 7} outside" in e.value.body["message"]
    for body, param in (({"logit_bias": {"3": 101}}, "logit_bias"),
                        ({"logit_bias": {"x": 1}}, "logit_bias"),
                        ({"logit_bias": {"3": "1"}}, 'logit_bias["3"]')):
        assert_error(post(daemon, "/v1/completions", {"prompt": PROMPT, **body}), 400, param)
    req = text_request(PROMPT, 2)
    req.sampling.logit_bias[vocab] = 1.0
    r = stream(daemon.stub, req)
    assert r.code == grpc.StatusCode.INVALID_ARGUMENT, r
    assert r.details == (f"sampling.logit_bias: token id {vocab} outside the vocabulary "
                         f"[0, {vocab})")


# ---------------------------------------------------------------------------
# --served_model_name and GET /v1/models/{id}.

NAMES = ["tiny-a", "tiny-b", "tiny-c"]


@pytest.fixture(scope="module")
def named_daemon(kvserve_module_factory):
    # Comma-separated and repeated, as vLLM's --served-model-name takes several.
    return kvserve_module_factory("--http_port=-1", "--served_model_name=tiny-a,tiny-b",
                                  "--served_model_name", "tiny-c")


def test_served_model_names_are_listed_and_retrievable(named_daemon):
    client = client_for(named_daemon)
    models = client.models.list().data
    assert [m.id for m in models] == NAMES
    assert all(m.root == TINY and m.object == "model" and m.owned_by == "kvserve"
               for m in models)
    for name in NAMES:
        m = client.models.retrieve(name)
        assert (m.id, m.root) == (name, TINY)
        assert m.model_extra["max_model_len"] == named_daemon.model_info().max_model_len
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve(TINY)  # the --model value is not a served name now
    assert e.value.body["code"] == "model_not_found", e.value.body
    assert list(named_daemon.model_info().served_model_names) == NAMES
    assert named_daemon.model_info().model_name == TINY


def test_requests_name_a_served_model_or_get_404(named_daemon):
    client = client_for(named_daemon)
    for name in NAMES:
        out = client.completions.create(model=name, prompt=PROMPT, max_tokens=3, temperature=0)
        assert out.model == NAMES[0] and out.usage.completion_tokens == 3
    for other in (TINY, "tiny", "tiny-a,tiny-b"):
        with pytest.raises(openai.NotFoundError) as e:
            client.completions.create(model=other, prompt=PROMPT, max_tokens=3)
        assert e.value.body["code"] == "model_not_found", e.value.body
        assert e.value.body["param"] == "model"
        assert all(n in e.value.body["message"] for n in NAMES)
    r = post(named_daemon, "/tokenize", {"model": "nope", "prompt": "x"})
    assert_error(r, 404, "model")


def test_default_name_is_the_model_value_and_escapes_decode(daemon):
    client = client_for(daemon)
    assert [m.id for m in client.models.list().data] == [TINY]
    assert client.models.retrieve(TINY).id == TINY
    assert list(daemon.model_info().served_model_names) == [TINY]
    r = get(daemon, "/v1/models/builtin%3Atiny")
    assert r.status_code == 200 and r.json()["id"] == TINY, r.text
    err = assert_error(get(daemon, "/v1/models/builtin%3Ahuge"), 404, "model")
    assert err["code"] == "model_not_found" and "builtin:huge" in err["message"], err
    r = post(daemon, "/v1/models/builtin:tiny", {})
    assert r.status_code == 405, r.text


# ---------------------------------------------------------------------------
# POST /v1/completions/render and /v1/chat/completions/render (vLLM's shape).


def test_completions_render_gives_each_prompts_ids_without_generating(daemon):
    before = daemon.metrics()
    body = {"model": TINY, "prompt": [PROMPT, "Other words"], "max_tokens": 5,
            "temperature": 0.3, "seed": 4, "logit_bias": {"7": 2}}
    r = post(daemon, "/v1/completions/render", body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    out = r.json()
    assert isinstance(out, list) and len(out) == 2
    for entry, prompt in zip(out, body["prompt"]):
        tok = post(daemon, "/tokenize", {"prompt": prompt}).json()["tokens"]
        assert entry["token_ids"] == tok
        assert entry["model"] == TINY and entry["request_id"].startswith("cmpl-")
        assert entry["stream"] is False
        s = entry["sampling_params"]
        assert (s["max_tokens"], s["temperature"], s["seed"], s["n"]) == (5, 0.3, 4, 1), s
        assert s["logit_bias"] == {"7": 2.0}
    # The ids are the prompt a generation sees.
    gen = client_for(daemon).completions.create(model=TINY, prompt=PROMPT, max_tokens=1)
    assert gen.usage.prompt_tokens == len(out[0]["token_ids"])
    ids = post(daemon, "/v1/completions/render", {"prompt": [5, 6, 7]}).json()
    assert [e["token_ids"] for e in ids] == [[5, 6, 7]]
    after = daemon.metrics()  # one generation (above), no other engine request
    assert kf.metric(after, "kvserve_api_requests_total", api="http") == \
        kf.metric(before, "kvserve_api_requests_total", api="http") + 1


def test_chat_render_equals_transformers_and_the_chat_prompt(chat_daemon, chat_dir):  # noqa: F811
    path, hf = chat_dir
    from test_openai_http import MESSAGES_AS_STRINGS
    want = hf.encode(hf.apply_chat_template(MESSAGES_AS_STRINGS, tokenize=False,
                                            add_generation_prompt=True),
                     add_special_tokens=False)
    r = post(chat_daemon, "/v1/chat/completions/render",
             {"model": str(path), "messages": MESSAGES, "stream": True,
              "stream_options": {"include_usage": True}})
    assert r.status_code == 200, r.text
    out = r.json()
    assert isinstance(out, dict)
    assert out["token_ids"] == want
    assert out["request_id"].startswith("chatcmpl-") and out["features"] is None
    assert out["stream"] is True and out["stream_options"]["include_usage"] is True
    gen = client_for(chat_daemon).chat.completions.create(model=str(path), messages=MESSAGES,
                                                          max_tokens=1)
    assert gen.usage.prompt_tokens == len(want)


def test_render_errors_are_the_endpoints_errors(daemon, chat_daemon):
    err = assert_error(post(daemon, "/v1/completions/render", {"model": "nope", "prompt": "x"}),
                       404, "model")
    assert err["code"] == "model_not_found"
    assert_error(post(daemon, "/v1/completions/render", {"prompt": "x", "temperature": -1}),
                 400, "temperature")
    assert_error(post(daemon, "/v1/completions/render", {}), 400, "prompt")
    assert_error(post(daemon, "/v1/chat/completions/render",
                      {"messages": [{"role": "user", "content": "hi"}]}), 400, "messages")
    assert_error(post(chat_daemon, "/v1/chat/completions/render", {"messages": []}), 400,
                 "messages")
    assert_error(post(daemon, "/v1/completions/render", "{not json"), 400, "body")
    for key in ("return_token_offsets", "return_assistant_tokens_mask"):
        assert_error(post(daemon, "/v1/completions/render", {"prompt": "x", key: True}), 400, key)
    r = post(daemon, "/v1/completions/render", {"prompt": "x", "return_token_offsets": False})
    assert r.status_code == 200, r.text
    r = get(daemon, "/v1/completions/render")
    assert r.status_code == 405, r.text


# ---------------------------------------------------------------------------
# continue_final_message (assistant prefill), rendered as transformers renders it.

PREFILL = [{"role": "system", "content": "Be brief."},
           {"role": "user", "content": "What is the capital of France?"},
           {"role": "assistant", "content": "The capital of France is"}]


def test_continue_final_message_renders_transformers_ids_and_continues(chat_daemon,
                                                                      chat_dir):  # noqa: F811
    path, hf = chat_dir
    want_text = hf.apply_chat_template(PREFILL, tokenize=False, add_generation_prompt=False,
                                       continue_final_message=True)
    assert want_text.endswith("The capital of France is")  # the turn is left open
    want = hf.encode(want_text, add_special_tokens=False)
    body = {"model": str(path), "messages": PREFILL, "continue_final_message": True,
            "add_generation_prompt": False}
    assert post(chat_daemon, "/v1/chat/completions/render", body).json()["token_ids"] == want
    assert post(chat_daemon, "/tokenize", body).json()["tokens"] == want
    client = client_for(chat_daemon)
    out = client.chat.completions.create(
        model=str(path), messages=PREFILL, max_tokens=6, temperature=0,
        extra_body={"continue_final_message": True, "add_generation_prompt": False,
                    "ignore_eos": True})
    assert out.usage.prompt_tokens == len(want)
    # The continuation is what the gRPC API generates from those ids.
    ref = stream(chat_daemon.stub, kf.ids_request(want, 6, ignore_eos=True)).check_ok()
    assert out.choices[0].message.content == ref.text
    # Closed, the same conversation is longer: the template's end of turn.
    closed = hf.encode(hf.apply_chat_template(PREFILL, tokenize=False), add_special_tokens=False)
    assert closed[:len(want)] == want and len(closed) > len(want)


@pytest.mark.parametrize("extra,why", [
    ({"continue_final_message": True}, "add_generation_prompt"),  # its default is true
    ({"continue_final_message": True, "add_generation_prompt": True}, "add_generation_prompt"),
])
def test_continue_final_message_with_a_generation_prompt_is_400(chat_daemon, chat_dir,  # noqa: F811
                                                                extra, why):
    with pytest.raises(openai.BadRequestError) as e:
        client_for(chat_daemon).chat.completions.create(
            model=str(chat_dir[0]), messages=PREFILL, max_tokens=2, extra_body=extra)
    assert e.value.body["param"] == "continue_final_message"
    assert why in e.value.body["message"]


def test_continue_final_message_needs_an_assistant_message_last(chat_daemon, chat_dir):  # noqa: F811
    with pytest.raises(openai.BadRequestError) as e:
        client_for(chat_daemon).chat.completions.create(
            model=str(chat_dir[0]), messages=MESSAGES, max_tokens=2,
            extra_body={"continue_final_message": True, "add_generation_prompt": False})
    assert e.value.body["param"] == "continue_final_message"
    assert 'role "user"' in e.value.body["message"]
