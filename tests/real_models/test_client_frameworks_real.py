"""The agent frameworks and SDK wrappers teams point at an OpenAI-compatible server, against the
daemon serving SmolLM2-135M-Instruct (fetched by real_models.fetch) under a served name without
"/" and Qwen 2.5's chat template (Hermes tool calls):

  * openai-agents (pinned in tests/clients/requirements.txt): one agent run with a function
    tool, over the Responses API and over chat completions; the first turn must call it (tool_choice "required"), the agent
    runs it and sends its output back, and the model answers in text;
  * the openai SDK's responses.create / responses.stream for text and json_schema output, and
    models.retrieve of the served name; a request naming another model is 404
    model_not_found;
  * LiteLLM's completion with "openai/<served name>";
  * LangChain (langchain-openai): with_structured_output of a pydantic model and bind_tools with
    a required tool give a validated object and a tool call.
A 135M model does not choose tools reliably by itself: the forced choices are constrained by the
grammar, so these check what kvserve guarantees the frameworks, not the model's judgement.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import openai
import pytest
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import chat_templates_hub as hub  # noqa: E402
import kvserve_fixtures as kf  # noqa: E402
from fetch_real_models import cache_dir  # noqa: E402

os.environ["NO_PROXY"] = "127.0.0.1,localhost"
os.environ["no_proxy"] = "127.0.0.1,localhost"
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

MODEL_DIR = cache_dir() / "smollm2-135m-instruct"
SERVED = "smollm2"


class City(BaseModel):
    name: str = Field(max_length=20)
    country: str = Field(max_length=20)
    population_millions: int = Field(ge=0, le=50)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    if not (MODEL_DIR / ".complete").exists():
        pytest.skip(f"{MODEL_DIR} is not there (the real_models.fetch test fetches it; it skips "
                    "where PyPI cannot be reached)")
    tmp = tmp_path_factory.mktemp("daemon")
    template = tmp / "qwen25.jinja"
    template.write_text(hub.QWEN25_INSTRUCT)
    d = kf.start_daemon(tmp, "--http_port=-1", f"--served_model_name={SERVED}",
                        f"--chat_template={template}", model=str(MODEL_DIR))
    assert d.http_url, d.stdout_text()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.http_url + "/v1", api_key="unused", max_retries=0,
                         timeout=600)


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_openai_agents_runs_a_tool_turn(daemon, api):
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel,
                        Runner, function_tool, set_tracing_disabled)

    set_tracing_disabled(True)
    calls = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        calls.append(city)
        return f"18 degrees and sunny in {city}"

    model_class = OpenAIResponsesModel if api == "responses" else OpenAIChatCompletionsModel
    model = model_class(
        model=SERVED, openai_client=openai.AsyncOpenAI(base_url=daemon.http_url + "/v1",
                                                       api_key="unused", max_retries=0,
                                                       timeout=600))
    agent = Agent(name="weather", instructions="Answer with the tool's result.", model=model,
                  tools=[get_weather],
                  model_settings=ModelSettings(tool_choice="required", temperature=0,
                                               max_tokens=96, parallel_tool_calls=False))
    result = asyncio.run(Runner.run(agent, "What is the weather in Paris?", max_turns=4))
    kinds = [item.type for item in result.new_items]
    print("openai-agents items:", kinds, "tool calls:", calls, "final:", result.final_output)
    # The forced first turn calls the tool once (parallel_tool_calls false); the agent resets
    # tool_choice to auto after it, and the model may call it again before it answers.
    assert calls and all(c == calls[0] and c for c in calls), calls
    assert kinds[0] == "tool_call_item" and kinds[1] == "tool_call_output_item", kinds
    assert "tool_call_item" in kinds and "tool_call_output_item" in kinds, kinds
    assert isinstance(result.final_output, str) and result.final_output.strip(), result


def test_responses_text_and_json_schema(client):
    text = client.responses.create(model=SERVED, input="Say hello.", max_output_tokens=24,
                                   temperature=0)
    assert text.output_text.strip() and text.usage.output_tokens > 0
    parsed = client.responses.parse(model=SERVED, input="Describe Paris.", text_format=City,
                                    max_output_tokens=128, temperature=0)
    assert parsed.status == "completed", parsed
    city = parsed.output_parsed
    assert isinstance(city, City) and city.name
    with client.responses.stream(model=SERVED, input="Describe Oslo.", text_format=City,
                                 max_output_tokens=128, temperature=0) as stream:
        final = stream.get_final_response()
    City.model_validate_json(final.output_text)


def test_served_name_for_the_sdk_and_litellm(client, daemon):
    import litellm

    assert client.models.retrieve(SERVED).id == SERVED
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}],
                                       max_tokens=2)
    assert e.value.body["code"] == "model_not_found"
    reply = litellm.completion(model=f"openai/{SERVED}", api_base=daemon.http_url + "/v1",
                               api_key="unused", max_tokens=8, temperature=0,
                               messages=[{"role": "user", "content": "Say hi."}])
    assert reply.choices[0].message.content
    assert reply.usage.completion_tokens > 0


def test_langchain_structured_output_and_bind_tools(daemon):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=SERVED, base_url=daemon.http_url + "/v1", api_key="unused",
                     temperature=0, max_tokens=128, max_retries=0, timeout=600)
    city = llm.with_structured_output(City).invoke("Describe Rome.")
    assert isinstance(city, City) and city.name

    @tool
    def get_time(zone: str) -> str:
        """The time in a time zone."""
        return "12:00"

    message = llm.bind_tools([get_time], tool_choice="get_time").invoke("What time is it in UTC?")
    (call,) = message.tool_calls
    assert call["name"] == "get_time" and isinstance(call["args"].get("zone"), str), call
    json.dumps(call["args"])
