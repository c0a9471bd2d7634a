#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/<target>/ (run from the repo
root with the .venv of scripts/setup.sh: `.venv/bin/python tests/fuzz/make_seeds.py`).

Seeds are real inputs of each parser, laid out in the FuzzInput encoding of
tests/fuzz/fuzz_input.h: a piece is a little-endian u16 length then its bytes.
The configs come from transformers' config classes, the tokenizers from the
tokenizers library (a byte-level BPE as GPT-2 / Llama 3 / Qwen ship, and a
SentencePiece-converted BPE with byte fallback as Llama 2 / Mistral ship), the
safetensors files from the safetensors library, the requests from protoc's
Python stubs. Deterministic: running it twice writes the same files. Saved
crashes live beside the seeds as crash-<sha1> and are never rewritten here.
"""
from __future__ import annotations

import json
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np
import transformers
from safetensors.numpy import save as save_safetensors
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"


def piece(data: bytes | str) -> bytes:
    if isinstance(data, str):
        data = data.encode()
    return struct.pack("<H", len(data)) + data


def write(target: str, name: str, data: bytes | str) -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data.encode() if isinstance(data, str) else data)


def configs() -> dict[str, str]:
    small = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                 bos_token_id=1, eos_token_id=2, pad_token_id=0)
    made = {
        "llama3": transformers.LlamaConfig(
            **small, rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                       high_freq_factor=4.0, original_max_position_embeddings=64)),
        "llama_linear": transformers.LlamaConfig(
            **small, rope_scaling=dict(rope_type="linear", factor=2.0)),
        "mistral": transformers.MistralConfig(**small, sliding_window=32),
        "qwen2": transformers.Qwen2Config(**small),
        "qwen3": transformers.Qwen3Config(**small, head_dim=32),
        "phi3": transformers.Phi3Config(
            **small, original_max_position_embeddings=64, partial_rotary_factor=0.75,
            rope_scaling=dict(type="longrope", short_factor=[1.0] * 6, long_factor=[2.0] * 6)),
        "gemma2": transformers.Gemma2Config(**small, head_dim=16, attn_logit_softcapping=50.0,
                                            final_logit_softcapping=30.0, sliding_window=32),
        "gemma3": transformers.Gemma3TextConfig(**small, head_dim=16, sliding_window=32),
    }
    return {name: c.to_json_string() for name, c in made.items()}


def byte_level_tokenizer() -> str:
    vocab = {"h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7, "he": 8, "ll": 9,
             "llo": 10, "hello": 11, "Ġw": 12, "or": 13, "Ġwor": 14, "ld": 15, "Ġworld": 16,
             "!": 17, "Ċ": 18, "Ã": 19, "©": 20, "Ã©": 21}
    merges = [("h", "e"), ("l", "l"), ("ll", "o"), ("he", "llo"), ("Ġ", "w"), ("o", "r"),
              ("Ġw", "or"), ("l", "d"), ("Ġwor", "ld"), ("Ã", "©")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|end|>", "<|begin|>"])
    tok.add_tokens(["<tool>"])
    return tok.to_str()


def byte_fallback_tokenizer() -> str:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for p in ["▁", "h", "e", "l", "o", "w", "r", "d", "▁h", "he", "ll", "▁he", "llo", "▁hello",
              "▁w", "or", "▁wor", "ld", "▁world", "é"]:
        vocab[p] = len(vocab)
    merges = [("▁", "h"), ("h", "e"), ("l", "l"), ("▁h", "e"), ("ll", "o"), ("▁he", "llo"),
              ("▁", "w"), ("o", "r"), ("▁w", "or"), ("l", "d"), ("▁wor", "ld")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return tok.to_str()


def safetensors_files() -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    f32 = save_safetensors({"a": rng.standard_normal((3, 4)).astype(np.float32),
                            "b.weight": rng.standard_normal((5,)).astype(np.float32)})
    f16 = save_safetensors({"w": rng.standard_normal((2, 3)).astype(np.float16),
                            "ids": np.arange(4, dtype=np.int64)}, metadata={"format": "pt"})
    # bf16 as the raw bytes torch writes: the upper halves of the fp32 values.
    raw = rng.standard_normal((4,)).astype(np.float32).view(np.uint32) >> 16
    header = json.dumps({"x": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}).encode()
    bf16 = struct.pack("<Q", len(header)) + header + raw.astype(np.uint16).tobytes()
    return {"f32": f32, "f16_i64_metadata": f16, "bf16": bf16}


def generate_requests() -> dict[str, bytes]:
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    import kvserve_fixtures as kf  # noqa: PLC0415

    stubs = Path(tempfile.mkdtemp())
    kf.generate_stubs(stubs)
    sys.path.insert(0, str(stubs))
    from kvserve.v1 import kvserve_pb2 as pb  # noqa: PLC0415

    text = pb.GenerateRequest(text="Hello, world", request_id="seed-1")
    tokens = pb.GenerateRequest(token_ids=pb.TokenIds(ids=[1, 72, 105]))
    full = pb.GenerateRequest(
        text="héllo", add_special_tokens=False, logprobs=3, priority=-1, cache_salt="tenant",
        sampling=pb.SamplingParams(temperature=0.8, top_p=0.9, top_k=20, min_p=0.05,
                                   repetition_penalty=1.1, presence_penalty=0.5,
                                   frequency_penalty=-0.5, seed=7),
        stopping=pb.StoppingParams(max_tokens=8, min_tokens=2, ignore_eos=True,
                                   stop_token_ids=[10, 13], stop=["\n\n", "END"],
                                   skip_special_tokens=False))
    biased = pb.GenerateRequest(text="hi", sampling=pb.SamplingParams(
        temperature=0, logit_bias={104: 100.0, 105: -100.0, 300: 1.0}))
    # First byte of each seed: bit 0 turns the checkpoint sampling defaults on.
    return {"logit_bias": b"\x00" + biased.SerializeToString(),
            "text": b"\x00" + text.SerializeToString(),
            "token_ids": b"\x01" + tokens.SerializeToString(),
            "all_fields": b"\x00" + full.SerializeToString()}


SEED_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def openai_requests() -> dict[str, bytes]:
    """Bodies the openai client sends (captured by a mock transport), plus the
    vLLM extensions; first byte: endpoint (0 completions, 1 chat, 2 /tokenize,
    3 /detokenize) | 4 when a chat template is loaded."""
    import httpx2  # noqa: PLC0415 (the openai client's HTTP library)
    import openai  # noqa: PLC0415

    bodies: list[bytes] = []

    def capture(request):
        bodies.append(request.content)
        return httpx2.Response(400, json={"error": {"message": "seed"}})

    client = openai.OpenAI(base_url="http://seed/v1", api_key="k", max_retries=0,
                           http_client=httpx2.Client(transport=httpx2.MockTransport(capture)))
    calls = [
        (0, "completion", lambda: client.completions.create(
            model="builtin:tiny", prompt="Hello", max_tokens=8, temperature=0.7, top_p=0.9,
            seed=3, n=2, logprobs=2, stop=["\n", "END"], presence_penalty=0.1,
            frequency_penalty=0.2, echo=False, user="u",
            extra_body={"top_k": 5, "min_p": 0.05, "repetition_penalty": 1.1,
                        "ignore_eos": True, "min_tokens": 1})),
        (0, "completion_stream", lambda: client.completions.create(
            model="builtin:tiny", prompt=[[1, 72, 105], [256, 104]], max_tokens=4, stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True})),
        (4 | 1, "chat", lambda: client.chat.completions.create(
            model="builtin:tiny", max_completion_tokens=6, logprobs=True, top_logprobs=3,
            messages=[{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": [{"type": "text", "text": "héllo"}]}])),
        (4 | 1, "chat_stream", lambda: client.chat.completions.create(
            model="builtin:tiny", stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "hi"}], temperature=0, n=3, stop="x")),
        (0, "completion_logit_bias", lambda: client.completions.create(
            model="builtin:tiny", prompt="Hello", max_tokens=4, seed=1,
            logit_bias={"104": 100, "105": -100, "999": 5})),
        (4 | 1, "chat_logit_bias", lambda: client.chat.completions.create(
            model="builtin:tiny", messages=[{"role": "user", "content": "hi"}], temperature=0,
            logit_bias={"120": 2.5, "0x1": 1})),
        (4 | 1, "chat_continue_final_message", lambda: client.chat.completions.create(
            model="builtin:tiny", messages=[{"role": "user", "content": "hi"},
                                            {"role": "assistant", "content": "Hello, I"}],
            extra_body={"continue_final_message": True, "add_generation_prompt": False})),
        (4 | 1, "chat_tools_auto", lambda: client.chat.completions.create(
            model="builtin:tiny", messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=SEED_TOOLS)),
        (4 | 1, "chat_tools_required", lambda: client.chat.completions.create(
            model="builtin:tiny", messages=[{"role": "user", "content": "Weather?"}],
            tools=SEED_TOOLS, tool_choice="required", parallel_tool_calls=False, stream=True)),
        (4 | 1, "chat_tools_named_second_turn", lambda: client.chat.completions.create(
            model="builtin:tiny", tools=SEED_TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            messages=[{"role": "user", "content": "Weather?"},
                      {"role": "assistant", "content": None, "tool_calls": [
                          {"id": "call_1", "type": "function", "function": {
                              "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "5C"}])),
        (1, "chat_no_template", lambda: client.chat.completions.create(
            model="builtin:tiny", messages=[{"role": "user", "content": "hi"}])),
    ]
    out = {}
    for flags, name, call in calls:
        try:
            call()
        except openai.BadRequestError:
            pass
        out[name] = bytes([flags]) + bodies[-1]
    out["tokenize"] = b"\x02" + json.dumps({"prompt": "hi", "add_special_tokens": False}).encode()
    out["tokenize_chat"] = b"\x06" + json.dumps(
        {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}).encode()
    out["detokenize"] = b"\x03" + json.dumps({"tokens": [104, 105, 256]}).encode()
    out["nulls"] = b"\x00" + json.dumps({"prompt": "x", "n": None, "stop": None,
                                          "future": {"a": [1]}}).encode()
    return out


def responses_requests() -> dict[str, bytes]:
    """Bodies the openai client's responses.create sends (captured by a mock transport):
    text, instructions, input items with a function call and its output, tools, a json_schema
    text format, streaming; for responses_request, the body as it is."""
    import httpx2  # noqa: PLC0415 (the openai client's HTTP library)
    import openai  # noqa: PLC0415

    bodies: list[bytes] = []

    def capture(request):
        bodies.append(request.content)
        return httpx2.Response(400, json={"error": {"message": "seed"}})

    client = openai.OpenAI(base_url="http://seed/v1", api_key="k", max_retries=0,
                           http_client=httpx2.Client(transport=httpx2.MockTransport(capture)))
    weather = {"type": "function", "name": "get_weather", "description": "Weather of a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                              "required": ["city"]}, "strict": True}
    calls = {
        "text": lambda: client.responses.create(model="builtin:tiny", input="Hi",
                                                instructions="Be brief.", max_output_tokens=8,
                                                temperature=0.5, top_p=0.9),
        "items_tools": lambda: client.responses.create(
            model="builtin:tiny", tools=[weather], tool_choice="auto", parallel_tool_calls=True,
            input=[{"role": "developer", "content": "Use tools."},
                   {"role": "user", "content": [{"type": "input_text", "text": "Paris?"}]},
                   {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                    "arguments": '{"city": "Paris"}'},
                   {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]),
        "json_schema_stream": lambda: client.responses.create(
            model="builtin:tiny", input="Is it?", stream=True, store=False,
            text={"format": {"type": "json_schema", "name": "v", "strict": True,
                             "schema": {"type": "object",
                                        "properties": {"a": {"enum": ["yes", "no"]}}}}}),
        "named_tool": lambda: client.responses.create(
            model="builtin:tiny", input="x", tools=[weather],
            tool_choice={"type": "function", "name": "get_weather"}),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
        except openai.APIStatusError:
            pass
        out[name] = bodies[-1]
    return out


def structured_output_requests() -> dict[str, bytes]:
    """Bodies with a structured-output constraint as the openai client sends them
    (chat.completions.parse with a pydantic model, response_format, vLLM's
    extra_body fields), for structured_output: flags byte (1: compile and walk),
    a piece of walk choices, the body."""
    import enum  # noqa: PLC0415
    from typing import Optional  # noqa: PLC0415

    import httpx2  # noqa: PLC0415
    import openai  # noqa: PLC0415
    import pydantic  # noqa: PLC0415

    class Color(str, enum.Enum):
        red = "red"
        blue = "blue"

    class Item(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=8)
        count: int = pydantic.Field(ge=0, le=9)
        color: Optional[Color]

    class Order(pydantic.BaseModel):
        items: list[Item] = pydantic.Field(max_length=2)
        paid: bool

    bodies: list[bytes] = []

    def capture(request):
        bodies.append(request.content)
        return httpx2.Response(400, json={"error": {"message": "seed"}})

    client = openai.OpenAI(base_url="http://seed/v1", api_key="k", max_retries=0,
                           http_client=httpx2.Client(transport=httpx2.MockTransport(capture)))
    messages = [{"role": "user", "content": "an order"}]
    calls = [
        ("parse_pydantic", lambda: client.chat.completions.parse(
            model="builtin:tiny", messages=messages, response_format=Order, max_tokens=64)),
        ("json_object", lambda: client.chat.completions.create(
            model="builtin:tiny", messages=messages, response_format={"type": "json_object"})),
        ("structured_regex", lambda: client.completions.create(
            model="builtin:tiny", prompt="x", extra_body={
                "structured_outputs": {"regex": "(ab|c)[0-9]{1,3}"}})),
        ("structured_choice", lambda: client.completions.create(
            model="builtin:tiny", prompt="x", extra_body={
                "structured_outputs": {"choice": ["yes", "no", "a \"quote\""]}})),
        ("structured_grammar", lambda: client.completions.create(
            model="builtin:tiny", prompt="x", extra_body={
                "structured_outputs": {"grammar": 'root ::= "(" item ("," item)* ")"\n'
                                                  'item ::= [a-z]+ | root'}})),
        ("guided_json", lambda: client.chat.completions.create(
            model="builtin:tiny", messages=messages, extra_body={
                "guided_json": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
                "guided_decoding_backend": "xgrammar"})),
        ("guided_choice", lambda: client.chat.completions.create(
            model="builtin:tiny", messages=messages, extra_body={"guided_choice": ["a", "b"]})),
    ]
    out = {}
    for name, call in calls:
        try:
            call()
        except openai.BadRequestError:
            pass
        out[name] = b"\x01" + piece(bytes(range(7, 7 + 40))) + bodies[-1]
    out["no_walk"] = b"\x00" + piece(b"") + bodies[0]
    return out


def kv_codec_seeds() -> dict[str, bytes]:
    """Rows for kv_codec: format index (kAllKvDtypes order), dim - 1, fp32s."""
    rng = np.random.default_rng(3)
    normal = rng.standard_normal(64).astype("<f4").tobytes()
    # Exact ties between fp8 / fp4 / int codes once divided by the scale.
    ties = np.array([448, 1.0625, 0.75, 2.5, 5.0, -3.5, 0.5, 2 ** -7], dtype="<f4").tobytes()
    special = np.array([0.0, -0.0, np.inf, 1e-40, -3e38, np.nan, 1.0, -1.0],
                       dtype="<f4").tobytes()
    seeds = {}
    for index, name in enumerate(["auto", "bfloat16", "float16", "fp8_e4m3", "int8", "int4",
                                  "fp4_e2m1"]):
        seeds[f"{name}_d64"] = bytes([index, 63]) + normal
        seeds[f"{name}_ties_d16"] = bytes([index, 15]) + ties
        seeds[f"{name}_odd_d7"] = bytes([index, 6]) + normal[:28]
    seeds["fp8_e4m3_special_d32"] = bytes([3, 31]) + special
    seeds["int4_nan_d48"] = bytes([5, 47]) + special
    return seeds


def gguf_files() -> dict[str, bytes]:
    """Small GGUFs written by the gguf package (gguf.GGUFWriter): a one-layer
    llama with a gpt2 vocabulary and merges (Q8_0, Q4_0, Q4_1, F16, BF16
    tensors), a one-layer gemma3 with a llama vocabulary of scores and no
    merges (K-quant blocks of random bytes with finite scales), and a file of
    metadata alone with every value type."""
    import gguf  # noqa: PLC0415
    from gguf.quants import quantize  # noqa: PLC0415

    rng = np.random.default_rng(52)
    T = gguf.GGMLQuantizationType

    def k_blocks(qtype, rows, scale_offsets):
        elems, size = gguf.GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, size=(rows * 256 // elems, size), dtype=np.uint8)
        for off in scale_offsets:
            raw[:, off:off + 2] = np.full((raw.shape[0], 1), 0.01, np.float16).view(np.uint8)
        return raw.reshape(rows, -1)

    def model(arch, hidden, head_dim, tensors, vocab_kvs):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "m.gguf"
            w = gguf.GGUFWriter(str(path), arch)
            w.add_block_count(1)
            w.add_context_length(64)
            w.add_embedding_length(hidden)
            w.add_feed_forward_length(hidden)
            w.add_head_count(2)
            w.add_head_count_kv(1)
            w.add_layer_norm_rms_eps(1e-6)
            w.add_key_length(head_dim)
            w.add_value_length(head_dim)
            vocab_kvs(w)
            for name, (data, qtype) in tensors.items():
                w.add_tensor(name, data, raw_dtype=qtype)
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
            return path.read_bytes()

    def f32(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + list("Helowrd \u0120") + ["He", "ll", "Hell"]

    def gpt2_vocab(w):
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("smollm")
        w.add_token_list(tokens)
        w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
        w.add_token_merges(["H e", "l l", "He ll"])
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")

    h = 32
    llama = {
        "token_embd.weight": (quantize(f32(len(tokens), h), T.Q8_0), T.Q8_0),
        "blk.0.attn_norm.weight": (f32(h), T.F32),
        "blk.0.attn_q.weight": (quantize(f32(h, h), T.Q4_0), T.Q4_0),
        "blk.0.attn_k.weight": (quantize(f32(h // 2, h), T.Q4_1), T.Q4_1),
        "blk.0.attn_v.weight": (quantize(f32(h // 2, h), T.F16), T.F16),
        "blk.0.attn_output.weight": (quantize(f32(h, h), T.BF16), T.BF16),
        "blk.0.ffn_norm.weight": (f32(h), T.F32),
        "blk.0.ffn_gate.weight": (quantize(f32(h, h), T.Q5_0), T.Q5_0),
        "blk.0.ffn_up.weight": (quantize(f32(h, h), T.Q5_1), T.Q5_1),
        "blk.0.ffn_down.weight": (f32(h, h), T.F32),
        "output_norm.weight": (f32(h), T.F32),
    }
    words = ["\u2581", "a", "b", "\u2581a", "ab", "  "]
    pieces = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)] + words

    def spm_vocab(w):
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(pieces)
        w.add_token_scores([0.0] * 260 + [-1.0 - i for i in range(len(words))])
        w.add_token_types([3, 3, 3, 2] + [6] * 256 + [1] * len(words))  # 6: BYTE
        w.add_bos_token_id(2)
        w.add_eos_token_id(1)
        w.add_unk_token_id(3)
        w.add_add_bos_token(True)

    # K-quant rows are 256 values: hidden 256, two heads of 16.
    g, d = 256, 16
    gemma = {
        "token_embd.weight": (k_blocks(T.Q2_K, len(pieces), [80, 82]), T.Q2_K),
        "blk.0.attn_norm.weight": (f32(g), T.F32),
        "blk.0.attn_q.weight": (k_blocks(T.Q4_K, 2 * d, [0, 2]), T.Q4_K),
        "blk.0.attn_k.weight": (k_blocks(T.Q5_K, d, [0, 2]), T.Q5_K),
        "blk.0.attn_v.weight": (k_blocks(T.Q3_K, d, [108]), T.Q3_K),
        "blk.0.attn_q_norm.weight": (f32(d), T.F32),
        "blk.0.attn_k_norm.weight": (f32(d), T.F32),
        "blk.0.attn_output.weight": (quantize(f32(g, 2 * d), T.Q8_0), T.Q8_0),
        "blk.0.ffn_gate.weight": (k_blocks(T.Q6_K, 4, [208]), T.Q6_K),
        "output_norm.weight": (f32(g), T.F32),
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kv.gguf"
        w = gguf.GGUFWriter(str(path), "llama")
        w.add_uint8("t.u8", 7)
        w.add_int8("t.i8", -7)
        w.add_uint16("t.u16", 700)
        w.add_int16("t.i16", -700)
        w.add_uint32("t.u32", 70000)
        w.add_int32("t.i32", -70000)
        w.add_float32("t.f32", 0.5)
        w.add_bool("t.bool", True)
        w.add_string("t.str", "héllo")
        w.add_uint64("t.u64", 1 << 40)
        w.add_int64("t.i64", -(1 << 40))
        w.add_float64("t.f64", 1e-9)
        w.add_array("t.strs", ["a", "bc", ""])
        w.add_array("t.ints", [1, 2, 3])
        w.add_array("t.nested", [[1, 2], [3]])
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.close()
        metadata = path.read_bytes()
    return {"llama_gpt2": model("llama", h, h // 2, llama, gpt2_vocab),
            "gemma3_spm": model("gemma3", g, d, gemma, spm_vocab),
            "metadata_types": metadata}


def write_gguf_seeds() -> None:
    for name, data in gguf_files().items():
        write("gguf", name, data)


def write_kv_codec_seeds() -> None:
    for name, data in kv_codec_seeds().items():
        write("kv_codec", name, data)


def tool_call_texts() -> dict[str, bytes]:
    """Model outputs in each tool-call format (format byte, chunk-seed byte, text), the JSON
    written by Python's json as the chat templates' tojson writes it, and broken variants."""
    weather = {"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2]}}
    time_call = {"name": "get_time", "arguments": {}}
    hermes = "".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in (weather, time_call))
    llama = {"name": "get_weather", "parameters": weather["arguments"]}
    texts = {
        "hermes": (0, "I will look.\n" + hermes),
        "hermes_unclosed": (0, "<tool_call>\n" + json.dumps(weather)),
        "hermes_broken": (0, "<tool_call>\n" + json.dumps(weather)[:-3] + "</tool_call> x"),
        "llama3": (1, "<|python_tag|>" + json.dumps(llama) + "; " + json.dumps(llama)),
        "llama3_text": (1, "The weather in Paris is mild."),
        "mistral": (2, "[TOOL_CALLS]" + json.dumps([weather, time_call])),
        "mistral_broken": (2, "Sure [TOOL_CALLS][" + json.dumps(weather) + ", {"),
        "json": (3, json.dumps([weather, time_call], indent=2)),
        "json_not_a_call": (3, json.dumps({"city": "Paris"})),
    }
    return {name: bytes([fmt, i * 37 % 256]) + text.encode()
            for i, (name, (fmt, text)) in enumerate(texts.items())}


def kv_events_seeds() -> dict[str, bytes]:
    """Batches for kv_events (layout in tests/fuzz/kv_events_fuzz.cc)."""
    def u64(x: int) -> bytes:
        return struct.pack("<Q", x)

    def stored(blocks: int, block_size: int, ids, parent=None, salt: str = "") -> bytes:
        out = bytes([0, blocks - 1, block_size - 1, 1 if parent is not None else 0])
        if parent is not None:
            out += u64(parent)
        out += b"".join(u64(i) for i in ids)
        out += b"".join(u64(t) for t in range(100, 100 + blocks * block_size))
        return out + piece(salt)

    def removed(ids) -> bytes:
        return bytes([1, len(ids)]) + b"".join(u64(i) for i in ids)

    ts = struct.pack("<d", 1796236550.5924506)
    chain = (stored(2, 4, [7, 2**63 + 5]) + stored(1, 4, [11], parent=2**63 + 5)
             + removed([11, 7]) + bytes([2]))
    seeds = {}
    for flags, name in [(0, "map_gpu"), (1, "array_gpu"), (2, "map_cpu"), (3, "array_cpu")]:
        seeds[f"chain_{name}"] = bytes([flags]) + ts + chain
    seeds["salted_map"] = bytes([0]) + ts + stored(3, 2, [1, 2, 3], parent=9, salt="tenant-a")
    seeds["integral_ts_array"] = bytes([1]) + struct.pack("<d", 1700000000.0) + bytes([2])
    seeds["nan_ts_empty"] = bytes([0]) + struct.pack("<d", float("nan"))
    return seeds


def write_kv_events_seeds() -> None:
    for name, data in kv_events_seeds().items():
        write("kv_events", name, data)


def main() -> None:
    for name, text in configs().items():
        write("config_json", name, text)
    write("config_json", "generation_config",
          json.dumps({"eos_token_id": [2, 0], "temperature": 0.6, "top_p": 0.9, "top_k": 50}))

    for name, data in safetensors_files().items():
        write("safetensors", name, b"\x00" + data)
    index = json.dumps({"metadata": {"total_size": 56},
                        "weight_map": {"a": "model-00001.safetensors",
                                       "b.weight": "model-00001.safetensors"}})
    write("safetensors", "sharded", b"\x01" + piece(safetensors_files()["f32"]) + index.encode())

    tokenizers = {"byte_level": byte_level_tokenizer(), "byte_fallback": byte_fallback_tokenizer()}
    texts = ["hello world!", " hello  world\n", "héllo é 日本 <|end|> <tool> x", ""]
    config = json.dumps({"bos_token": "<s>", "eos_token": {"content": "</s>"},
                         "add_bos_token": True})
    for tname, tjson in tokenizers.items():
        for i, text in enumerate(texts):
            cfg = config if tname == "byte_fallback" and i == 0 else ""
            write("tokenizer_json", f"{tname}_{i}", bytes([i & 3]) + piece(text) + piece(cfg) + tjson.encode())
        ids = b"".join(struct.pack("<H", i) for i in [3, 200, 201, 0, 40, 41, 42, 270, 1, 2, 260])
        write("detokenizer", tname, b"\x01" + piece(ids) + tjson.encode())
    # Byte tokenizer: cut UTF-8 (é = C3 A9, 日 = E6 97 A5), <bos>=256, <eos>=257.
    utf8_ids = [0x68, 0xC3, 0xA9, 0xE6, 0x97, 0x20, 0xA5, 256, 0xE6, 0x97, 0xA5, 257, 0xC3]
    write("detokenizer", "byte", b"\x00" + piece(b"".join(struct.pack("<H", i) for i in utf8_ids)))

    def stop_seed(flags, stops, max_tokens, min_tokens, extra, text_ids):
        out = bytes([flags, len(stops)]) + b"".join(piece(s) for s in stops)
        out += bytes([max_tokens - 1, min_tokens, extra])
        return out + b"".join(struct.pack("<H", i) for i in text_ids)

    hello = list(b"Hello, world. STOP here\n\nmore")
    write("stop_checker", "stop_string", stop_seed(0, ["STOP", "\n\n"], 64, 0, 0, hello))
    write("stop_checker", "min_tokens", stop_seed(2, ["o"], 64, 6, 0, hello))
    write("stop_checker", "eos", stop_seed(0, [], 64, 0, 0, list(b"abc") + [257] + list(b"d")))
    write("stop_checker", "length_cut_utf8", stop_seed(1, ["\xe6\x97\xa5"], 5, 0, 0, utf8_ids))
    write("stop_checker", "extra_stop_id", stop_seed(0, ["zz"], 64, 0, ord("!"), list(b"hi z!z")))

    for name, data in generate_requests().items():
        write("generate_request", name, data)
    for name, data in openai_requests().items():
        write("openai_request", name, data)
    for name, data in structured_output_requests().items():
        write("structured_output", name, data)
    for name, data in responses_requests().items():
        write("responses_request", name, data)
    for name, data in tool_call_texts().items():
        write("tool_call_parser", name, data)

    write_kv_codec_seeds()
    write_kv_events_seeds()
    write_gguf_seeds()

    # The Hub chat templates the oracle test renders, over a conversation.
    sys.path.insert(0, str(ROOT / "tests" / "oracle"))
    import chat_templates_hub as hub  # noqa: PLC0415

    conversation = json.dumps([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "18C"},
        {"role": "user", "content": "Thanks"}])
    for name in sorted(dir(hub)):
        source = getattr(hub, name)
        if name.isupper() and isinstance(source, str) and "{" in source:
            write("chat_template", name.lower(), bytes([1]) + piece(source) + conversation.encode())


if __name__ == "__main__":
    main()
