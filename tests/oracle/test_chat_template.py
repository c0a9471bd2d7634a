"""kvserve's Jinja engine (chat/) against transformers' apply_chat_template.

transformers renders with jinja2 (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, its tojson / raise_exception / strftime_now); kvserve renders
through tests/oracle/chat_template_driver.cc (one process per template). For
every template and conversation the two texts must be byte-identical, or both
must fail; a raise_exception() must give the same message on both sides.

  * test_construct: small templates written here, one per construct the
    engine supports (statements, loop variables, scoping, filters, tests,
    methods, whitespace control, errors), over a few contexts each.
  * test_hub_template: the chat templates of public checkpoints
    (chat_templates_hub.py) over many conversations: with and without a
    system message, multi-turn, tool calls and tool results, text-part
    content, reasoning, roles out of order, add_generation_prompt both ways.
  * test_hub_template_continue_final_message: the same templates over the
    conversations that end with an assistant message, with
    continue_final_message (the final message left open: the text cut where
    its content ends), and the error when it is set with add_generation_prompt.
  * test_checkpoint_files: ChatTemplate::FromCheckpoint finds the template
    where AutoTokenizer does (chat_template.jinja, chat_template.json,
    tokenizer_config.json string or named list) with its special tokens.
Runs offline (HF_HUB_OFFLINE=1): every tokenizer is built here.
"""
import copy
import json
import os
import subprocess
import sys

import jinja2
import pytest
from tokenizers import Tokenizer, models
from transformers import AutoTokenizer, PreTrainedTokenizerFast

sys.path.insert(0, os.path.dirname(__file__))
from chat_templates_hub import TEMPLATES  # noqa: E402

BUILD_DIR = os.environ.get("KVSERVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
DRIVER = os.path.join(BUILD_DIR, "tests", "kvserve_chat_template_driver")


def make_tokenizer(template, special):
    tok = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=template, **special)


def hf_render(tokenizer, case):
    kwargs = dict(case.get("extra_context") or {})
    if case.get("continue_final_message"):
        kwargs["continue_final_message"] = True
    try:
        text = tokenizer.apply_chat_template(copy.deepcopy(case["messages"]), tools=case.get("tools"),
                                             tokenize=False,
                                             add_generation_prompt=case["add_generation_prompt"], **kwargs)
        return {"text": text}
    except Exception as e:  # noqa: BLE001 - any failure must be a failure on both sides
        raised = type(e) is jinja2.exceptions.TemplateError  # raise_exception()
        return {"error": str(e), "raised": raised}


def run_driver(request):
    proc = subprocess.run([DRIVER], input=json.dumps(request), capture_output=True, text=True, timeout=120)
    out = json.loads(proc.stdout)
    return proc.returncode, out


def kvserve_render(template, special, cases):
    rc, out = run_driver({"template": template, "special_tokens": special, "cases": cases})
    if rc == 2:  # the template does not compile: every render fails
        return [{"error": out["error"]}] * len(cases)
    assert rc == 0, out
    return out["results"]


def assert_same(template, special, cases):
    tokenizer = make_tokenizer(template, special)
    ours = kvserve_render(template, special, cases)
    assert len(ours) == len(cases)
    checked_texts = 0
    for case, got in zip(cases, ours):
        want = hf_render(tokenizer, case)
        where = template[:300] + " with " + json.dumps(case, ensure_ascii=False)[:300]
        if "text" in want:
            assert "text" in got, f"kvserve failed where transformers rendered: {got} for {where}"
            assert got["text"] == want["text"], f"render differs for {where}"
            checked_texts += 1
        else:
            assert "error" in got, f"transformers failed ({want['error']}) but kvserve rendered {got} for {where}"
            if want["raised"]:
                assert got["error"] == want["error"], where
    return checked_texts


# ---------------------------------------------------------------------------
# Conversations

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two numbers: ünïcode \"quoted\" and\nnewline.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "number"}, "b": {"type": "integer", "default": 1.5}},
            "required": ["a", "b"]},
        "return": {"type": "number", "description": "The sum."}}},
    {"type": "function", "function": {
        "name": "search", "description": "  Search documents.  ",
        "parameters": {"type": "object", "properties": {
            "terms": {"type": "array", "items": {"type": "string"}, "description": "Words"},
            "filters": {"type": "object", "additionalProperties": {"type": "integer"}},
            "mode": {"type": ["string", "integer"]},
            "opts": {"type": "object"}, "any": {}},
            "required": ["terms"]}}},
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
TOOL_CALL_TURN = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call12345", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
    {"role": "tool", "tool_call_id": "call12345", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
    {"role": "assistant", "content": "It is 21 °C and clear in Paris."},
]

CONVERSATIONS = {
    "single": [{"role": "user", "content": "Hello!"}],
    "system": [SYSTEM, {"role": "user", "content": "Hi there"}],
    "multi_turn": [SYSTEM,
                   {"role": "user", "content": "What is 2+2?"},
                   {"role": "assistant", "content": "2+2 equals 4."},
                   {"role": "user", "content": "  And 3+3?  \n"}],
    "ends_with_assistant": [{"role": "user", "content": "Tell me a joke."},
                            {"role": "assistant", "content": "Why did the chicken cross the road?"}],
    "text_parts": [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                   {"role": "user", "content": [{"type": "text", "text": "Describe "},
                                                {"type": "text", "text": "this."}]}],
    "unicode_and_braces": [{"role": "user", "content": "日本語 😀 \"quotes\" 'single' {{ not_a_tag }} {% raw %} \\n"},
                           {"role": "assistant", "content": "Ça va?\n\nSure.\t"},
                           {"role": "user", "content": "<think>x</think> tail"}],
    "tool_call": [SYSTEM] + TOOL_CALL_TURN,
    "tool_call_no_system": TOOL_CALL_TURN,
    "two_tool_calls": [{"role": "user", "content": "Weather in Paris and Rome?"},
                       {"role": "assistant", "content": None, "tool_calls": [
                           {"id": "callaaaa1", "type": "function",
                            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                           {"id": "callbbbb2", "type": "function",
                            "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
                       {"role": "tool", "tool_call_id": "callaaaa1", "content": "sunny"},
                       {"role": "tool", "tool_call_id": "callbbbb2", "content": "rainy"}],
    "reasoning": [{"role": "user", "content": "Think first."},
                  {"role": "assistant", "content": "The answer is 7.", "reasoning_content": "3+4=7"},
                  {"role": "user", "content": "Again?"},
                  {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nStill 7."}],
    "not_alternating": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    "assistant_first": [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"}],
    "empty_content": [{"role": "user", "content": ""}],
    "two_systems": [SYSTEM, {"role": "system", "content": "Second system."},
                    {"role": "user", "content": "hi"}],
}


def cases_for(extras, with_tools):
    cases = []
    for name, messages in CONVERSATIONS.items():
        for agp in (False, True):
            for extra in extras:
                for tools in ([None, TOOLS] if with_tools else [None]):
                    cases.append({"name": name, "messages": messages, "tools": tools,
                                  "add_generation_prompt": agp, "extra_context": extra})
    return cases


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_hub_template(name):
    template, special, extras = TEMPLATES[name]
    cases = cases_for(extras, with_tools=True)
    rendered = assert_same(template, special, cases)
    # Each template must render most conversations (not only fail on both sides).
    assert rendered >= len(cases) // 3, f"only {rendered} of {len(cases)} cases rendered"


# Conversations that end with an assistant message (assistant prefill), the
# last one's content as a string, as text parts, and with trailing spaces.
PREFILL = {name: messages for name, messages in CONVERSATIONS.items()
           if messages[-1]["role"] == "assistant"}
PREFILL["parts"] = [{"role": "user", "content": "Name three colours."},
                    {"role": "assistant", "content": [{"type": "text", "text": "Red, "},
                                                      {"type": "text", "text": "green"}]}]
PREFILL["trailing_space"] = [SYSTEM, {"role": "user", "content": "Count to three."},
                             {"role": "assistant", "content": "One, two, "}]
PREFILL["open_think"] = [{"role": "user", "content": "2+2?"},
                         {"role": "assistant", "content": "<think>\nfour"}]


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_hub_template_continue_final_message(name):
    template, special, extras = TEMPLATES[name]
    cases = [{"name": conv, "messages": messages, "tools": tools, "add_generation_prompt": False,
              "continue_final_message": True, "extra_context": extra}
             for conv, messages in PREFILL.items() for extra in extras for tools in (None, TOOLS)]
    rendered = assert_same(template, special, cases)
    assert rendered >= len(cases) // 3, f"only {rendered} of {len(cases)} cases rendered"
    # The cut removes what the template writes after the final content: the
    # text is a prefix of the closed turn's and ends with the content.
    closed = kvserve_render(template, special, [dict(c, continue_final_message=False)
                                                for c in cases])
    opened = kvserve_render(template, special, cases)
    for case, c, o in zip(cases, closed, opened):
        if "text" in o:
            assert c["text"].startswith(o["text"]), case["name"]
            last = case["messages"][-1]["content"]
            tail = last if isinstance(last, str) else last[-1]["text"]
            assert o["text"].rstrip().endswith(tail.strip()), (case["name"], o["text"][-80:])
    both = [dict(cases[0], add_generation_prompt=True)]
    assert "error" in kvserve_render(template, special, both)[0]
    assert "error" in hf_render(make_tokenizer(template, special), both[0])


# ---------------------------------------------------------------------------
# Constructs: (template, contexts). Each context is passed as template kwargs
# beside a one-message conversation.

CONSTRUCTS = {
    "if_elif_else": ("{% if x > 2 %}big{% elif x == 2 %}two{% else %}small{% endif %}",
                     [{"x": 1}, {"x": 2}, {"x": 3}, {"x": 2.0}]),
    "for_loop_vars": ("{% for i in items %}[{{ loop.index }}/{{ loop.length }} {{ loop.index0 }} "
                      "{{ loop.revindex }} {{ loop.revindex0 }} {{ loop.first }} {{ loop.last }} "
                      "{{ loop.previtem }} {{ loop.nextitem }}]{{ i }}{% endfor %}",
                      [{"items": ["a", "b", "c"]}, {"items": []}, {"items": [1]}]),
    "for_else_filter": ("{% for i in items if i % 2 == 0 %}{{ i }}:{{ loop.index }}/{{ loop.length }},"
                        "{% else %}none{% endfor %}", [{"items": [1, 2, 3, 4, 6]}, {"items": [1, 3]}]),
    "for_dict_unpack": ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"
                        "{% for k in d %}{{ k }}{% endfor %}{% for k, v in d|items %}{{ v }}{% endfor %}",
                        [{"d": {"z": 1, "a": [1, 2], "m": {"x": None}}}]),
    "loop_controls": ("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}"
                      "{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", [{}]),
    "nested_loops": ("{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}"
                     "{% endfor %}{{ loop.index }}|{% endfor %}", [{}]),
    "scoping": ("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"
                "{% if true %}{% set y = 5 %}{% endif %}{{ y }}", [{}]),
    "namespace": ("{% set ns = namespace(count=0, names=[]) %}{% for m in messages %}"
                  "{% set ns.count = ns.count + 1 %}{% set ns.names = ns.names + [m.role] %}{% endfor %}"
                  "{{ ns.count }} {{ ns.names }} {{ ns.missing is defined }}", [{}]),
    "macro": ("{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}"
              "{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }} {{ greet() }}", [{}]),
    "macro_recursive": ("{% macro render(v) %}{% if v is mapping %}{% for k, x in v.items() %}{{ k }}:"
                        "{{ render(x) }};{% endfor %}{% elif v is iterable and v is not string %}"
                        "[{% for x in v %}{{ render(x) }}{% endfor %}]{% else %}{{ v }}{% endif %}{% endmacro %}"
                        "{{ render(d) }}", [{"d": {"a": [1, {"b": "c"}], "d": None, "e": True}}]),
    "set_block": ("{% set block %}inside {{ 1 + 1 }}{% endset %}[{{ block }}]", [{}]),
    "set_tuple": ("{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c|length }}{{ c[1] }}", [{}]),
    "concat_arith": ("{{ 'a' ~ 1 ~ none ~ true }} {{ 'x' + 'y' }} {{ 1 + 2 * 3 - 4 / 2 }} {{ 7 // 2 }} "
                     "{{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 10 / 4 }} "
                     "{{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ -x }} {{ 0.1 + 0.2 }}", [{"x": 3}]),
    "comparisons": ("{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ true == 1 }} "
                    "{{ 'a' in 'cat' }} {{ 3 not in [1, 2] }} {{ 'k' in d }} {{ 1 < 2 < 3 }} "
                    "{{ [1, 2] == [1, 2] }} {{ none == none }} {{ missing == missing }}", [{"d": {"k": 1}}]),
    "logic": ("{{ x and y }} {{ x or y }} {{ not x }} {{ none or 'default' }} {{ '' and 'no' }} "
              "{{ 'yes' if x else 'no' }} {{ 'a' if false }}|{{ not x in [1] }}",
              [{"x": 1, "y": 0}, {"x": 0, "y": "s"}]),
    "slicing": ("{{ s[1:] }} {{ s[:-1] }} {{ s[::-1] }} {{ s[::2] }} {{ l[1:3] }} {{ l[-2:] }} "
                "{{ l[::-1] }} {{ l[5:] }} {{ s[0] }} {{ s[-1] }} {{ l[-1] }} {{ l.0 }}",
                [{"s": "héllo wörld", "l": [1, 2, 3, 4]}]),
    "attr_item_access": ("{{ d.a }} {{ d['b'].c }} {{ d.missing }}|{{ d.missing is defined }} "
                         "{{ l[10] is defined }} {{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}",
                         [{"d": {"a": 1, "b": {"c": "x"}}, "l": [1]}]),
    "literals": ("{{ [1, 'a', none, true, 1.0, [2]] }} {{ {'k': 'v', 'n': 1} }} {{ (1, 2)|join('+') }} "
                 "{{ {'a': {'b': [1, 2]}} | tojson }} {{ 1e3 }} {{ 0.1 }} {{ 100000000000000000.0 }} "
                 "{{ \"dq\" 'sq' }} {{ 'esc\\n\\t\\'' }} {{ \"it's\" }}", [{}]),
    "tests": ("{{ x is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ d is mapping }} "
              "{{ l is iterable }} {{ s is iterable }} {{ x is number }} {{ f is number }} {{ b is number }} "
              "{{ l is sequence }} {{ b is boolean }} {{ x is integer }} {{ f is float }} {{ x is odd }} "
              "{{ x is even }} {{ x is divisibleby 3 }} {{ x is divisibleby(2) }} {{ b is true }} "
              "{{ x is eq 3 }} {{ 'A' is upper }} {{ 'a' is lower }} {{ x is in [3] }} {{ n is not none }} "
              "{{ d is not mapping }} {{ y is mapping }} {{ y is iterable }}",
              [{"x": 3, "n": None, "s": "s", "d": {}, "l": [], "f": 1.5, "b": True}]),
    "string_filters": ("{{ s|trim }}|{{ s|upper }}|{{ s|lower }}|{{ s|capitalize }}|{{ s|title }}|"
                       "{{ s|length }}|{{ s|replace('o', '0') }}|{{ s|first }}|{{ s|last }}|"
                       "{{ 'x-y z(a'|title }}|{{ s|trim('. ') }}|{{ s|count }}",
                       [{"s": "  hello wOrld. "}, {"s": "émile ÇA"}]),
    "list_filters": ("{{ l|join(', ') }}|{{ l|length }}|{{ l|first }}|{{ l|last }}|{{ l|sort }}|"
                     "{{ l|sort(reverse=true) }}|{{ l|unique|list }}|{{ l|select('odd')|list }}|"
                     "{{ l|reject('odd')|list }}|{{ l|map('string')|join }}|{{ l|sum }}|{{ l|min }}|{{ l|max }}|"
                     "{{ l|reverse|list }}|{{ l|list }}|{{ 'abc'|list }}|{{ words|sort|join(' ') }}|"
                     "{{ words|unique|join(' ') }}|{{ words|sort(case_sensitive=true)|join(' ') }}",
                     [{"l": [3, 1, 2, 3, 5], "words": ["b", "A", "a", "B", "c"]}]),
    "attr_filters": ("{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('/') }}|"
                     "{{ msgs|rejectattr('role', 'equalto', 'user')|list|length }}|"
                     "{{ msgs|selectattr('tool_calls')|list|length }}|{{ msgs|selectattr('tool_calls', 'defined')|list|length }}|"
                     "{{ msgs|map(attribute='meta.n', default=0)|list }}|{{ msgs|sort(attribute='content')|map(attribute='role')|join }}|"
                     "{{ msgs|join(', ', attribute='role') }}",
                     [{"msgs": [{"role": "user", "content": "b", "meta": {"n": 1}},
                                {"role": "assistant", "content": "a", "tool_calls": [1]},
                                {"role": "user", "content": "c"}]}]),
    "default_filter": ("{{ missing|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} "
                       "{{ x|d('y') }} {{ missing|default }}|", [{"x": 0}]),
    "tojson": ("{{ v|tojson }}\n{{ v|tojson(indent=2) }}\n{{ v|tojson(sort_keys=true) }}\n"
               "{{ v|tojson(indent=4, sort_keys=true) }}\n{{ 'é\"\\n'|tojson }} {{ [] | tojson(indent=2) }} "
               "{{ {}|tojson }} {{ 1.0|tojson }} {{ none|tojson }} {{ v|tojson(separators=[',', ':']) }}",
               [{"v": {"z": [1, 2.5, "ü", None, True, {}], "a": {"x": "<&>"}, "m": "line\nbreak\u0001"}}]),
    "conversions": ("{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} "
                    "{{ 3|float }} {{ 5|string ~ 'x' }} {{ [1, 2]|string }} {{ d|items|list|length }} {{ (d|items|first)[0] }} {{ -3|abs }} "
                    "{{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.1|round(0, 'ceil') }} {{ 7|round }} "
                    "{{ 'x'|safe }}", [{"d": {"a": 1}}]),
    "indent": ("{{ s|indent }}|{{ s|indent(2, true) }}|{{ s|indent(width='> ', first=true, blank=true) }}",
               [{"s": "a\n\nb\nc"}]),
    "string_methods": ("{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' h') }}|{{ s.split() }}|"
                       "{{ s.split('l') }}|{{ s.split('l', 1) }}|{{ s.startswith(' h') }}|{{ s.endswith(('x', ' ')) }}|"
                       "{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ s.replace('l', 'L', 2) }}|"
                       "{{ s.find('l') }}|{{ s.count('l') }}|{{ '-'.join(['a', 'b']) }}|{{ '{} and {x}'.format(1, x=2) }}|"
                       "{{ 'ab1 cD'.capitalize() }}|{{ '1st x'.title() }}|{{ 'a\\nb'.splitlines() }}",
                       [{"s": " hello world "}]),
    "dict_methods": ("{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}|{{ d.keys()|list }}|{{ d.values()|list }}|"
                     "{{ d|length }}|{{ 'a' in d.keys() }}", [{"d": {"b": 2, "a": 1}}]),
    "whitespace_control": ("a  {{- ' b ' -}}  c\n  {%- if true %}\n  d\n  {%- endif %}  \n"
                           "{#- comment -#}   e  {# kept #} f\n    {% if true %}\n    g\n    {% endif %}\n"
                           "  {%+ if true %}h{% endif %}\n{% if true +%}\ni{% endif %}\n", [{}]),
    "trim_lstrip": ("<ul>\n  {% for i in [1, 2] %}\n    <li>{{ i }}</li>\n  {% endfor %}\n</ul>\n"
                    "  {# c #}\nx {% if true %} y {% endif %} z\n\t{% set q = 1 %}\nend\n", [{}]),
    "crlf_and_trailing_newline": ("line1\r\n{% if true %}\r\nline2\r\n{% endif %}\r\n{{ 'v' }}\n", [{}]),
    "raw": ("a {% raw %}{{ not evaluated }} {% if %}{% endraw %} b\n  {%- raw -%}  \n x {{ y }}\n  {%- endraw -%}  \n"
            "c\n  {% raw %}\n  r\n  {% endraw %}\nd{%+ raw %}\ne{% endraw +%}\nf", [{}]),
    "filter_block_dictsort": ("{% filter upper|replace('A', '4') %}abc {{ x }}{% endfilter %}|"
                              "{% filter indent(2, true) %}l1\nl2{% endfilter %}|"
                              "{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %}|"
                              "{% for k, v in d|dictsort(by='value', reverse=true) %}{{ k }}{% endfor %}|"
                              "{% for i in [1, 2] %}{% filter trim %} {{ i }} {% endfilter %}{% endfor %}",
                              [{"x": "a", "d": {"b": 2, "A": 3, "c": 1}}]),
    "globals": ("{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} "
                "{{ dict(a=1, b='x') }} {{ strftime_now('%Y') | length }}", [{}]),
    "raise_exception": ("{% if x %}{{ raise_exception('bad input: ' ~ x) }}{% endif %}ok",
                        [{"x": 0}, {"x": "boom"}]),
    "undefined_errors": ("{{ missing.attr }}", [{}]),
    "undefined_arith": ("{{ missing + 1 }}", [{}]),
    "type_errors": ("{{ 'a' + 1 }}", [{}]),
    "special_tokens": ("{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token is defined }}|"
                       "{{ messages|length }}|{{ add_generation_prompt }}|{{ tools }}|{{ documents }}", [{}]),
    "message_shape": ("{% for m in messages %}{{ m }}|{{ m.content is string }}|{{ m.get('x') }}|"
                      "{{ m.reasoning_content }}|{{ m.thinking }}{% endfor %}", [{}]),
    "generation_block": ("{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}",
                         [{}]),
    "python_repr": ("{{ v }}", [{"v": ["it's", 'say "hi"', "both ' \"", "tab\t", 1.0, -0.5, None, {"k": [True]}]}]),
    "cycle_and_filters_chain": ("{% for i in range(4) %}{{ loop.cycle('odd', 'even') }}{% endfor %} "
                                "{{ ' A b '|trim|lower|replace('b', 'c')|upper }} {{ [3, 1]|sort|first }}", [{}]),
}

SPECIAL_FOR_CONSTRUCTS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


@pytest.mark.parametrize("name", sorted(CONSTRUCTS))
def test_construct(name):
    template, contexts = CONSTRUCTS[name]
    messages = [{"role": "user", "content": "hi", "x": None}]
    if name == "message_shape":
        messages = [{"role": "user", "content": "hi", "x": None, "reasoning": "r1"},
                    {"role": "assistant", "content": [{"type": "text", "text": "t"}]}]
    cases = [{"messages": messages, "tools": None, "add_generation_prompt": agp, "extra_context": ctx}
             for ctx in contexts for agp in (False, True)]
    assert_same(template, SPECIAL_FOR_CONSTRUCTS, cases)


def test_raise_exception_message_and_error_lines():
    results = kvserve_render("line one\n{{ raise_exception('Roles must alternate') }}", {},
                             [{"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": False}])
    assert results == [{"error": "Roles must alternate"}]
    results = kvserve_render("a\nb\n{{ messages[0].content.nope.deeper }}", {},
                             [{"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": False}])
    assert "line 3" in results[0]["error"], results
    rc, out = run_driver({"template": "ok\n\n{% if x %}\n{{ x | no_such_filter }}\n{% endif %}", "cases": []})
    assert rc == 2 and "line 4" in out["error"] and "no_such_filter" in out["error"], out
    rc, out = run_driver({"template": "{% for x in y %}\n{% include 'x' %}{% endfor %}", "cases": []})
    assert rc == 2 and "line 2" in out["error"] and "include" in out["error"], out


# ---------------------------------------------------------------------------
# Finding the template in a checkpoint directory.

DEFAULT_T = "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{{ eos_token }}{% endfor %}"
TOOL_T = "TOOLS {{ tools|map(attribute='function.name')|join(',') }} {{ bos_token }}{{ messages[-1].content }}"


def checkpoint_cases():
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    return [{"messages": msgs, "tools": None, "add_generation_prompt": True},
            {"messages": msgs, "tools": TOOLS, "add_generation_prompt": False}]


def write_checkpoint(path, layout):
    tok = make_tokenizer(DEFAULT_T, {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"})
    tok.save_pretrained(path)
    config_path = os.path.join(path, "tokenizer_config.json")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    jinja_path = os.path.join(path, "chat_template.jinja")
    if os.path.exists(jinja_path):
        os.remove(jinja_path)
    config.pop("chat_template", None)
    # Special tokens as AddedToken objects, the way older checkpoints store them.
    config["bos_token"] = {"__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False,
                           "rstrip": False, "single_word": False, "special": True}
    if layout == "jinja":
        with open(jinja_path, "w", encoding="utf-8") as f:
            f.write(DEFAULT_T)
    elif layout == "json":
        with open(os.path.join(path, "chat_template.json"), "w", encoding="utf-8") as f:
            json.dump({"chat_template": DEFAULT_T}, f)
    elif layout == "config_string":
        config["chat_template"] = DEFAULT_T
    elif layout == "config_list":
        config["chat_template"] = [{"name": "default", "template": DEFAULT_T},
                                   {"name": "tool_use", "template": TOOL_T}]
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(config, f)


@pytest.mark.parametrize("layout", ["jinja", "json", "config_string", "config_list"])
def test_checkpoint_files(tmp_path, layout):
    write_checkpoint(str(tmp_path), layout)
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    if layout == "json":  # a processor's file: AutoProcessor sets it on the tokenizer
        with open(tmp_path / "chat_template.json", encoding="utf-8") as f:
            tokenizer.chat_template = json.load(f)["chat_template"]
    cases = checkpoint_cases()
    rc, out = run_driver({"model_dir": str(tmp_path), "cases": cases})
    assert rc == 0, out
    for case, got in zip(cases, out["results"]):
        want = hf_render(tokenizer, case)
        assert got == {"text": want["text"]}, (layout, case)


def test_checkpoint_without_template(tmp_path):
    write_checkpoint(str(tmp_path), "none")
    rc, out = run_driver({"model_dir": str(tmp_path), "cases": []})
    assert rc == 2 and "no chat template" in out["error"], out


# ---------------------------------------------------------------------------
# Random expressions: a seeded generator of small templates over a fixed
# context, so constructs meet in combinations nobody wrote down. Left out:
# slices of literals (jinja2 folds them at compile time, to undefined), str % x,
# tuples (kvserve stores them as lists, Python prints them as tuples) and
# undefined values inside lists (kvserve stores None, Python prints
# "Undefined"); chat templates print neither.

FUZZ_CONTEXT = {"s": "Hello, Wörld ", "t": "a,b,,c", "n": 7, "f": 2.5, "neg": -3, "b": True, "z": None,
                "e": "", "l": [3, 1, 2], "w": ["b", "A", "a"], "d": {"a": 1, "b": [1, 2], "c": "x"},
                "m": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " yo "}]}


def fuzz_expr(rng, depth):
    leaves = ["s", "t", "n", "f", "neg", "b", "z", "e", "l", "w", "d", "m", "missing", "1", "0", "-2", "3.5",
              "'x'", "'ab c'", "''", "true", "false", "none", "[1, 2]", "['p', 'q']", "{'k': 1}",
              "d.a", "d['b']", "m[0].role", "m[-1]['content']", "l[1]", "s[0]", "d.nope"]
    if depth <= 0 or rng.random() < 0.25:
        return rng.choice(leaves)
    a = fuzz_expr(rng, depth - 1)
    b = fuzz_expr(rng, depth - 1)
    kind = rng.randrange(9)
    if kind == 0:
        op = rng.choice(['+', '-', '*', '/', '//', '%', '~'])
        if op == '%':  # str % x is printf-style formatting, which kvserve does not do
            a = rng.choice(["n", "f", "neg", "b", "3", "2.5", "d.a", "l[0]"])
        return f"({a} {op} {b})"
    if kind == 1:
        return f"({a} {rng.choice(['==', '!=', '<', '>', '<=', '>=', 'in', 'not in'])} {b})"
    if kind == 2:
        return f"({a} {rng.choice(['and', 'or'])} {b})" if rng.random() < 0.7 else f"(not {a})"
    if kind == 3:
        return f"({a} if {b} else {fuzz_expr(rng, depth - 1)})"
    if kind == 4:
        if rng.random() < 0.15:
            attr_filter = rng.choice(["map(attribute='role')|list", "selectattr('role', 'eq', 'user')|list",
                                      "map(attribute='content')|join('/')", "rejectattr('content')|list"])
            return f"(m|{attr_filter})"
        flt = rng.choice(["trim", "upper", "lower", "capitalize", "title", "length", "first", "last", "join",
                          "join(', ')", "default('dv')", "default('dv', true)", "tojson", "tojson(indent=1)",
                          "string", "int", "float", "list", "replace('l', 'L')", "unique|list", "sort|list",
                          "select('odd')|list", "reject('defined')|list", "map('string')|list",
                          "round", "abs", "indent(2)", "reverse|list", "sum", "min", "max"])
        return f"({a}|{flt})"
    if kind == 5:
        test = rng.choice(["defined", "undefined", "none", "string", "mapping", "iterable", "number",
                           "sequence", "boolean", "integer", "float", "odd", "even", "divisibleby 3",
                           "eq 7", "in [1, 'x']", "lower", "upper", "true", "false"])
        return f"({a} is {'not ' if rng.random() < 0.3 else ''}{test})"
    if kind == 6:  # on variables: jinja2 folds constants, and literal[1:] folds to undefined
        var = rng.choice(["s", "t", "n", "f", "z", "e", "l", "w", "d", "m", "missing", "m[1]", "d.b"])
        return f"{var}[{rng.choice(['1:', ':-1', '::-1', '::2', '-2:', '1:2', '0'])}]"
    if kind == 7:
        meth = rng.choice(["strip()", "lstrip()", "rstrip('d ')", "split()", "split(',')", "upper()",
                           "lower()", "title()", "startswith('H')", "endswith(' ')", "replace('o', '0')",
                           "get('a')", "get('q', 'dq')", "keys()|list", "values()|list", "count('l')",
                           "find('l')"])
        return f"{a}.{meth}"
    defined = [x for x in leaves if x not in ("missing", "d.nope")]
    return f"[{rng.choice(defined)}, {rng.choice(defined)}]"


def test_random_expressions():
    import random
    rng = random.Random(20260517)
    templates = [f"{{{{ {fuzz_expr(rng, rng.randrange(1, 4))} }}}}" for _ in range(400)]
    # One template per expression: each must render identically or fail on both sides.
    rendered = 0
    for chunk in range(0, len(templates), 50):
        batch = templates[chunk:chunk + 50]
        for src in batch:
            case = {"messages": [{"role": "user", "content": "x"}], "tools": None,
                    "add_generation_prompt": False, "extra_context": FUZZ_CONTEXT}
            rendered += assert_same(src, {}, [case])
    assert rendered >= 150, rendered  # most generated expressions are valid Python too


def fuzz_whitespace_template(rng, depth):
    """Text with spaces, tabs and newlines around tags carrying -, + or nothing."""
    texts = ["a", " ", "  ", "\n", "\t", " \n ", "\n\n", "x y", "\n  ", "  \n", "\t\n\t"]

    def tag(open_, body, close):
        left = rng.choice(["", "", "-", "+"]) if open_ == "{%" else rng.choice(["", "-"])
        right = rng.choice(["", "", "-", "+"]) if close == "%}" else rng.choice(["", "-"])
        return f"{open_}{left} {body} {right}{close}"

    out = []
    for _ in range(rng.randrange(1, 5)):
        out.append(rng.choice(texts))
        kind = rng.randrange(6)
        if kind == 0 and depth > 0:
            out.append(tag("{%", "if true", "%}") + fuzz_whitespace_template(rng, depth - 1) + tag("{%", "endif", "%}"))
        elif kind == 1 and depth > 0:
            out.append(tag("{%", "for i in [1, 2]", "%}") + fuzz_whitespace_template(rng, depth - 1)
                       + tag("{%", "endfor", "%}"))
        elif kind == 2:
            out.append(tag("{{", "i|default('v')", "}}"))
        elif kind == 3:
            out.append(tag("{#", "c", "#}"))
        elif kind == 4:
            out.append(tag("{%", "set q = 1", "%}"))
        elif rng.random() < 0.3:  # raw: "+%}" cannot close its opening tag (jinja2's regex)
            left, right = rng.choice(["", "-", "+"]), rng.choice(["", "-"])
            body = rng.choice(texts) + "{{ i }}{% if %}" + rng.choice(texts)
            out.append(f"{{%{left} raw {right}%}}{body}" + tag("{%", "endraw", "%}"))
        else:
            out.append(rng.choice(texts))
    return "".join(out)


def test_random_whitespace_control():
    import random
    rng = random.Random(7)
    case = {"messages": [{"role": "user", "content": "x"}], "tools": None, "add_generation_prompt": False}
    rendered = 0
    for _ in range(300):
        rendered += assert_same(fuzz_whitespace_template(rng, 2), {}, [case])
    assert rendered == 300


def fuzz_program(rng, depth, in_loop=False):
    """Statements: for (filtered, else, loop variables, break/continue), if/elif/else, set (scoped
    by loops), namespace assignment and macro calls, around random expressions."""
    parts = []
    for _ in range(rng.randrange(1, 4)):
        kind = rng.randrange(8 if depth > 0 else 3)
        e = fuzz_expr(rng, 1)
        if kind == 0:
            parts.append(f"{{{{ {e} }}}}")
        elif kind == 1:
            parts.append(f"{{% set v = {e} %}}[{{{{ v }}}}]")
        elif kind == 2:
            parts.append(f"{{% set ns.c = ns.c ~ ({e}) %}}")
        elif kind == 3:
            seq = rng.choice(["l", "w", "m", "d", "s", "[]", "range(3)", "t.split(',')", "m|map(attribute='role')"])
            cond = rng.choice(["", "", " if x", " if loop is not defined", " if x != 1"])
            body = fuzz_program(rng, depth - 1, in_loop=True)
            tail = rng.choice(["", "{% else %}empty"])
            parts.append(f"{{% for x in {seq}{cond} %}}<{{{{ loop.index0 }}}}{{{{ loop.revindex }}}}"
                         f"{{{{ loop.last }}}}{{{{ x }}}}{body}>{tail}{{% endfor %}}")
        elif kind == 4:
            parts.append(f"{{% if {e} %}}{fuzz_program(rng, depth - 1, in_loop)}{{% elif {fuzz_expr(rng, 1)} %}}"
                         f"E{{% else %}}{fuzz_program(rng, depth - 1, in_loop)}{{% endif %}}")
        elif kind == 5:
            parts.append(f"{{{{ mk({e}) }}}}{{{{ mk(b={fuzz_expr(rng, 1)}, a=1) }}}}")
        elif kind == 6 and in_loop:
            parts.append(rng.choice(["{% if x == 1 %}{% break %}{% endif %}", "{% continue %}"]))
        else:
            parts.append(f"{{% set v %}}({e}){{% endset %}}{{{{ v|length }}}}")
    return "".join(parts)


def test_random_programs():
    import random
    rng = random.Random(99)
    prefix = "{% set ns = namespace(c='') %}{% macro mk(a, b=2) %}[{{ a }}|{{ b }}]{% endmacro %}"
    case = {"messages": [{"role": "user", "content": "x"}], "tools": None, "add_generation_prompt": False,
            "extra_context": FUZZ_CONTEXT}
    rendered = 0
    for _ in range(300):
        src = prefix + fuzz_program(rng, 2) + "{{ v is defined }}{{ ns.c }}"
        rendered += assert_same(src, {}, [case])
    assert rendered >= 100, rendered
