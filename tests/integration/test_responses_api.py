"""POST /v1/responses (OpenAI's Responses API) through the `openai` SDK's responses.create and
responses.stream, on the daemon serving builtin:tiny with a ChatML template:

  * a text response is the chat completion of the same conversation (instructions as the
    system message), token for token, with the Responses usage and output items;
  * streaming gives the event sequence the SDK assembles into the same response;
  * text.format json_schema constrains the output (it parses and validates);
  * max_output_tokens ends it "incomplete" with reason max_output_tokens;
  * input items (messages with text parts, developer role) render as the chat request would;
  * what needs state or is not served is a 400 naming the field.
"""

from __future__ import annotations

import json
import os

import openai
import pytest

import kvserve_fixtures as kf

os.environ["NO_PROXY"] = "127.0.0.1,localhost"
os.environ["no_proxy"] = "127.0.0.1,localhost"

MODEL = "tiny"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def daemon(kvserve_module_factory, tmp_path_factory):
    template = tmp_path_factory.mktemp("template") / "chatml.jinja"
    template.write_text(CHAT_TEMPLATE)
    return kvserve_module_factory("--http_port=-1", f"--served_model_name={MODEL}",
                                  f"--chat_template={template}")


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.http_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def test_text_response_is_the_chat_completion(client):
    resp = client.responses.create(model=MODEL, instructions="Be brief.", input="Say hi",
                                   max_output_tokens=12, temperature=0)
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": "Say hi"}],
        max_tokens=12, temperature=0)
    assert resp.object == "response" and resp.id.startswith("resp_")
    assert resp.output_text == chat.choices[0].message.content
    (item,) = resp.output
    assert item.type == "message" and item.role == "assistant"
    assert item.content[0].type == "output_text"
    assert resp.usage.input_tokens == chat.usage.prompt_tokens
    assert resp.usage.output_tokens == chat.usage.completion_tokens
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    assert resp.instructions == "Be brief." and resp.max_output_tokens == 12
    if chat.choices[0].finish_reason == "length":
        assert resp.status == "incomplete"
        assert resp.incomplete_details.reason == "max_output_tokens"
    else:
        assert resp.status == "completed" and resp.incomplete_details is None


def test_input_items_render_as_chat_messages(client):
    items = [
        {"role": "developer", "content": "Answer in one word."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Colour"},
                                                        {"type": "input_text", "text": "?"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Blue"}]},
        {"role": "user", "content": "Again"},
    ]
    resp = client.responses.create(model=MODEL, input=items, max_output_tokens=6, temperature=0)
    chat = client.chat.completions.create(
        model=MODEL, max_tokens=6, temperature=0,
        messages=[{"role": "system", "content": "Answer in one word."},
                  {"role": "user", "content": "Colour?"},
                  {"role": "assistant", "content": "Blue"},
                  {"role": "user", "content": "Again"}])
    assert resp.output_text == chat.choices[0].message.content
    assert resp.usage.input_tokens == chat.usage.prompt_tokens


VERDICT = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
           "required": ["answer"], "additionalProperties": False}


def test_stream_events_assemble_the_same_response(client):
    # A format the grammar completes, so that the stream ends with response.completed (the SDK's
    # get_final_response needs it; a length cut ends with response.incomplete, below).
    kwargs = dict(model=MODEL, input="Is it?", max_output_tokens=40, temperature=0,
                  text={"format": {"type": "json_schema", "name": "verdict", "schema": VERDICT}})
    whole = client.responses.create(**kwargs)
    types = []
    deltas = []
    with client.responses.stream(**kwargs) as stream:
        for event in stream:
            types.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    for t in ("response.output_item.added", "response.content_part.added",
              "response.output_text.done", "response.content_part.done",
              "response.output_item.done"):
        assert types.count(t) == 1, (t, types)
    assert "".join(deltas) == whole.output_text == final.output_text
    assert json.loads(final.output_text)["answer"] in ("yes", "no")
    assert final.usage.output_tokens == whole.usage.output_tokens
    # Cut by max_output_tokens: the last event is response.incomplete, with the text so far.
    cut = list(client.responses.create(model=MODEL, input="Go on", max_output_tokens=3,
                                       temperature=0, stream=True, extra_body={"ignore_eos": True}))
    assert cut[-1].type == "response.incomplete"
    assert cut[-1].response.incomplete_details.reason == "max_output_tokens"
    assert cut[-1].response.output_text == "".join(
        e.delta for e in cut if e.type == "response.output_text.delta")


def test_sequence_numbers_count_from_zero(client):
    events = list(client.responses.create(model=MODEL, input="Hi", max_output_tokens=4,
                                          temperature=0, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_json_schema_format_constrains_the_output(client):
    resp = client.responses.create(
        model=MODEL, input="Is the sky blue?", max_output_tokens=40, temperature=0,
        text={"format": {"type": "json_schema", "name": "verdict", "schema": VERDICT,
                         "strict": True}})
    assert resp.status == "completed"
    assert json.loads(resp.output_text)["answer"] in ("yes", "no")
    assert resp.text.format.type == "json_schema"


def test_max_output_tokens_makes_it_incomplete(client):
    resp = client.responses.create(model=MODEL, input="Write a long story", max_output_tokens=2,
                                   temperature=0, extra_body={"ignore_eos": True})
    assert resp.usage.output_tokens == 2
    assert resp.status == "incomplete"
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.output[0].status == "incomplete"


@pytest.mark.parametrize("extra,param", [
    ({"store": True}, "store"),
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"background": True}, "background"),
    ({"include": ["message.output_text.logprobs"]}, "include"),
    ({"reasoning": {"effort": "low"}}, "reasoning"),
    ({"truncation": "auto"}, "truncation"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0].type"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
    ({"input": 3}, "input"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"model": "other"}, "model"),
])
def test_unserved_fields_are_400s_naming_them(client, extra, param):
    body = {"model": MODEL, "input": "hi", **extra}
    with pytest.raises(openai.APIStatusError) as e:
        client.post("/responses", body=body, cast_to=object)
    assert e.value.status_code in (400, 404), e.value
    assert e.value.body["param"] == param, e.value.body


def test_stream_names_every_event(daemon):
    """On the wire, each SSE event has an `event:` line naming its type, as OpenAI sends them."""
    import http.client
    host, port = daemon.http_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("POST", "/v1/responses",
                     body=json.dumps({"model": MODEL, "input": "Hi", "max_output_tokens": 3,
                                      "stream": True, "temperature": 0}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
        raw = resp.read().decode()
    finally:
        conn.close()
    events = [e for e in raw.split("\n\n") if e]
    assert len(events) >= 8
    for e in events:
        name, data = e.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), e
        assert json.loads(data.removeprefix("data: "))["type"] == name.removeprefix("event: ")


WEATHER = {"type": "function", "name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object",
                          "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
                          "required": ["city"], "additionalProperties": False}}
CLOCK = {"type": "function", "name": "get_time", "description": "The time",
         "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}


def test_required_tool_choice_gives_a_function_call_item(client):
    resp = client.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER, CLOCK],
                                   tool_choice="required", max_output_tokens=60, temperature=0)
    calls = [item for item in resp.output if item.type == "function_call"]
    assert calls, resp.output
    for call in calls:
        assert call.call_id.startswith("call_") and call.id.startswith("fc_")
        assert call.name in ("get_weather", "get_time") and call.status == "completed"
        args = json.loads(call.arguments)
        assert (args == {}) if call.name == "get_time" else (args["city"] in ("Paris", "Oslo"))
    assert resp.status == "completed"


def test_named_tool_choice_streams_function_call_events(client):
    kwargs = dict(model=MODEL, input="Weather?", tools=[WEATHER, CLOCK],
                  tool_choice={"type": "function", "name": "get_weather"},
                  parallel_tool_calls=False, max_output_tokens=60, temperature=0)
    whole = client.responses.create(**kwargs)
    with client.responses.stream(**kwargs) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments)["city"] in ("Paris", "Oslo")
    (whole_call,) = [item for item in whole.output if item.type == "function_call"]
    assert whole_call.arguments == call.arguments
    for t in ("response.function_call_arguments.delta", "response.function_call_arguments.done"):
        assert types.count(t) == 1, types


def test_function_call_output_round_trips_as_a_tool_message(client, daemon):
    """The call and its output go back as input items: the prompt is the chat request's with the
    assistant's tool_calls and the tool message."""
    call = {"type": "function_call", "call_id": "call_7", "name": "get_weather",
            "arguments": '{"city": "Oslo"}'}
    result = {"type": "function_call_output", "call_id": "call_7", "output": "sunny"}
    resp = client.responses.create(
        model=MODEL, tools=[WEATHER], max_output_tokens=5, temperature=0,
        input=[{"role": "user", "content": "Weather?"}, call, result])
    chat = client.chat.completions.create(
        model=MODEL, tools=[{"type": "function", "function": {
            k: v for k, v in WEATHER.items() if k != "type"}}], max_tokens=5, temperature=0,
        messages=[{"role": "user", "content": "Weather?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "call_7", "type": "function",
                       "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
                  {"role": "tool", "tool_call_id": "call_7", "content": "sunny"}])
    assert resp.usage.input_tokens == chat.usage.prompt_tokens
    assert resp.output_text == (chat.choices[0].message.content or "")
