"""kvserve's tokenizers against Hugging Face `tokenizers` and `sentencepiece`.

Every tokenizer here is trained inside the test (on a few hundred generated
lines), saved, and loaded by kvserve through the oracle driver
(tests/oracle/tokenize_driver.cc, one process per tokenizer). For every text
of TEXTS, and for random id sequences, it checks:
  * Encode with and without special tokens == the library's ids;
  * Decode (skip_special false / true) == the library's decode;
  * streaming (IncrementalDetokenizer) == Decode, and no chunk is invalid UTF-8.
Kinds: GPT-2 style byte-level BPE (with and without add_prefix_space),
Llama-3 style (Split regex + ByteLevel, ignore_merges, specials, BOS template,
tokenizer_config.json), Qwen2 style (NFC + Qwen2 regex), SentencePiece BPE
and unigram models with byte fallback (tokenizer.model), and the
SentencePiece-converted tokenizer.json layouts of Llama 2 / Phi-3 / Gemma
(byte_fallback BPE, Metaspace or Prepend + Replace, ByteFallback decoder)
checked against transformers.AutoTokenizer.
"""
import json
import os
import random
import subprocess

import pytest
import sentencepiece as spm
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

BUILD_DIR = os.environ.get("KVSERVE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
DRIVER = os.path.join(BUILD_DIR, "tests", "kvserve_tokenize_driver")

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# A word added to the Llama-3 style vocab without merges: only ignore_merges
# can produce it as one token.
IGNORE_MERGES_WORD = "Ġsupercalifragilistic"

TEXTS = [
    "",
    " ",
    "   ",
    "Hello, world!",
    "hello world",
    "  leading spaces",
    "trailing spaces   ",
    "multiple   spaces\tand\ttabs\t\t\tend",
    "line1\nline2\r\nline3\n\n\nline4 \n",
    "The year 2024 had 365 days; pi is 3.14159 and 1234567890 is long.",
    "12 345 6789 0000000",
    "Ünïcödé façade naïve café résumé Ångström",
    "Straße, Fuß, groß, STRASSE",
    "e\u0301 vs é; A\u030a vs Å; n\u0303 vs ñ",  # combining sequences (NFC)
    "cafe\u0301 au lait",
    "日本語のテキストです。中文文本，标点符号！한국어 텍스트",
    "Emoji: 😀🎉👍🏽 ❤️ 🇺🇸 🤖",
    "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👩🏾‍💻 coder",
    "don't won't I'm you're they've we'll he'd it's",
    "DON'T WON'T I'M YOU'RE",
    "def f(x):\n    return x ** 2  # square\n\tpass",
    "punctuation!!! ??? ... --- ((( ))) [[ ]] {{ }}",
    "\u00a0nbsp\u2003em space\u3000ideographic space",
    "next\u0085line and zero\u200bwidth",
    "ſ long s, 'ſ and 'S, K kelvin",
    "<|begin_of_text|>Hello<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
    "special <|endoftext|> in text<|endoftext|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n",
    "a <tool> call\t<tool>  and x<tool>y",
    "[MASK] a[MASK]b [MASK].",
    "superc supercalifragilistic word",
    "Ⓐ circled ① number",
    "mixed: abc123def ٣٤٥ ½",
    "<s> and </s> as plain text",
]


def random_texts(count=200, seed=7):
    """Random mixes of the character classes the pre-tokenizer regexes care about."""
    rng = random.Random(seed)
    pools = [
        "abcXYZ", "0123456789", " ", "  ", "\t", "\n", "\r\n", ".,!?;:'\"-()[]{}#$%&*+/<=>@\\^_`|~",
        "'s", "'LL", "éüßñÅ", "e\u0301", "a\u0308", "日本語中文", "한국어", "😀🎉", "👍🏽",
        "👨‍👩‍👧", "\u200d", "\u00a0", "\u3000", "½①٣", "<|", "|>", "<|eot_id|>", "<|endoftext|>",
        "<tool>", "[MASK]", "▁",
        "\u0085", "\u2028", "\x0b", "\x0c", "\u180e", "\u200b", "ſ", "\u212a", "İ", "'S", "'ſ",
        "\U0001d518", "\u0300", "\ufeff", "\x00", "\x7f",
    ]
    return ["".join(rng.choice(pools) for _ in range(rng.randint(1, 30))) for _ in range(count)]


# KVSERVE_TOKENIZER_FUZZ=<n> raises the number of random texts (for a longer run).
TEXTS += random_texts(count=int(os.environ.get("KVSERVE_TOKENIZER_FUZZ", "200")))

WORDS = ("the quick brown fox jumps over lazy dog hello world token model server cache "
         "block prefix attention decode prefill batch stream request python rust code "
         "données café naïve résumé façade Straße groß über Ärger élève "
         "日本 語 中文 文本 한국어 テキスト 😀 🎉 👍 "
         "don't it's we'll they've I'm super cali fragi listic supercal").split()
PUNCT = [",", ".", "!", "?", ";", ":", "...", " - ", "(", ")", "'", '"']


def corpus(n=400, seed=0):
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 14))]
        line = ""
        for w in words:
            sep = rng.choice([" ", " ", " ", "  ", "\t", ""])
            line += sep + w + (rng.choice(PUNCT) if rng.random() < 0.2 else "")
        if rng.random() < 0.3:
            line += f" {rng.randint(0, 10 ** rng.randint(1, 7))}"
        if rng.random() < 0.2:
            line += "\n" + " " * rng.randint(1, 6) + "indented line"
        lines.append(line)
    lines += TEXTS[:25]
    return lines


def run_driver(path, texts, decode):
    request = {"path": str(path), "texts": texts, "decode": decode}
    proc = subprocess.run([DRIVER], input=json.dumps(request), capture_output=True, text=True,
                          timeout=60)
    out = json.loads(proc.stdout) if proc.stdout.strip() else {}
    if proc.returncode != 0 and "error" not in out:
        raise AssertionError(f"driver failed ({proc.returncode}): {proc.stderr}")
    return out


def random_id_lists(vocab_size, exclude=(), count=60, seed=1):
    rng = random.Random(seed)
    pool = [i for i in range(vocab_size) if i not in set(exclude)]
    return [[rng.choice(pool) for _ in range(rng.randint(1, 24))] for _ in range(count)]


# ---------------------------------------------------------------- builders


def train_bpe(pre_tokenizer, special_tokens, normalizer=None, ignore_merges=False, vocab_size=900):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special_tokens,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    return tok


def build_gpt2(directory, add_prefix_space):
    tok = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space),
                    ["<|endoftext|>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens([AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False),
                    AddedToken("日本語", normalized=False),  # outside the byte alphabet
                    AddedToken("é!", normalized=False)])     # inside it: decodes to 0xE9 '!'
    tok.add_special_tokens([AddedToken("[MASK]", single_word=True)])
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"))
    return tok


def build_llama3(directory):
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>"]
    tok = train_bpe(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        specials, ignore_merges=True)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    # A vocab entry no merge produces: only ignore_merges yields it whole.
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    vocab[IGNORE_MERGES_WORD] = max(max(vocab.values()), max(t["id"] for t in spec["added_tokens"])) + 1
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<|begin_of_text|>",
                   "eos_token": {"content": "<|eot_id|>", "special": True},
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    return Tokenizer.from_file(path)


def build_qwen2(directory):
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = train_bpe(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        specials, normalizer=normalizers.NFC())
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # A normalized added token: matches "cafe\u0301" after NFC.
    tok.add_tokens([AddedToken("café", normalized=True)])
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"))
    return tok


def build_sentencepiece(directory, model_type, llama_like):
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, "tokenizer")
    options = dict(model_prefix=prefix, model_type=model_type, vocab_size=600,
                   byte_fallback=True, character_coverage=0.995,
                   user_defined_symbols=["<tool>"], num_threads=1, minloglevel=2,
                   hard_vocab_limit=False)
    if llama_like:  # Llama-2's settings: raw text, keep whitespace runs
        options.update(normalization_rule_name="identity", remove_extra_whitespaces=False,
                       split_digits=True, add_dummy_prefix=True)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus()), **options)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


# ---------------------------------------------------------------- checks


class HfOracle:
    def __init__(self, tok):
        self.tok = tok

    def encode(self, text, special):
        return self.tok.encode(text, add_special_tokens=special).ids

    def decode(self, ids, skip):
        return self.tok.decode(ids, skip_special_tokens=skip)


class SpOracle:
    def __init__(self, sp, unigram):
        self.sp = sp
        self.unigram = unigram
        self.ties = 0

    def encode(self, text, special):
        return self.sp.encode(text, add_bos=special)

    def equivalent(self, ours, theirs):
        """Unigram Viterbi ties: the system libsentencepiece (0.1.x) and the
        pinned Python sentencepiece (0.2.x) may pick different segmentations
        of exactly equal score. Those are accepted (and counted); nothing else."""
        if not self.unigram or len(ours) != len(theirs):
            return False
        piece = self.sp.id_to_piece
        if "".join(map(piece, ours)) != "".join(map(piece, theirs)):
            return False
        score = lambda ids: sum(self.sp.get_score(i) for i in ids)
        if abs(score(ours) - score(theirs)) > 1e-4:
            return False
        self.ties += 1
        return True

    def decode(self, ids, skip):
        return self.sp.decode(ids)  # control pieces never show


def check(oracle, path, decode_extra):
    lib_ids = [oracle.encode(t, True) for t in TEXTS]
    decode = lib_ids + decode_extra
    out = run_driver(path, TEXTS, decode)
    assert "error" not in out, out["error"]
    problems = []
    for text, want, got in zip(TEXTS, lib_ids, out["encode"]):
        if "error" in got:
            problems.append(f"encode {text!r}: {got['error']}")
            continue
        plain = oracle.encode(text, False)
        same = lambda a, b: a == b or (hasattr(oracle, "equivalent") and oracle.equivalent(a, b))
        if not same(got["ids"], plain):
            problems.append(f"encode {text!r}:\n  kvserve {got['ids']}\n  library {plain}")
        if not same(got["ids_special"], want):
            problems.append(f"encode+special {text!r}:\n  kvserve {got['ids_special']}\n  library {want}")
    for ids, got in zip(decode, out["decode"]):
        for skip, key in ((False, "text"), (True, "text_skip")):
            want = oracle.decode(ids, skip)
            if got[key] != want:
                problems.append(f"decode(skip={skip}) {ids}:\n  kvserve {got[key]!r}\n  library {want!r}")
            stream = got["stream_skip" if skip else "stream"]
            if stream != got[key]:
                problems.append(f"stream(skip={skip}) {ids}: {stream!r} != decode {got[key]!r}")
        if got["stream_invalid_chunks"]:
            problems.append(f"stream {ids}: {got['stream_invalid_chunks']} invalid UTF-8 chunks")
    assert not problems, f"{len(problems)} mismatches:\n" + "\n".join(problems[:20])
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("tokenizers")


@pytest.mark.parametrize("add_prefix_space", [False, True])
def test_gpt2_style(workdir, add_prefix_space):
    directory = workdir / f"gpt2_{add_prefix_space}"
    tok = build_gpt2(directory, add_prefix_space)
    out = check(HfOracle(tok), directory, random_id_lists(tok.get_vocab_size()))
    assert out["vocab_size"] == tok.get_vocab_size()
    assert out["bos"] is None and out["eos"] is None


def test_llama3_style(workdir):
    directory = workdir / "llama3"
    tok = build_llama3(directory)
    # ignore_merges matters: the whole word is one token.
    word_id = tok.token_to_id(IGNORE_MERGES_WORD)
    assert word_id in tok.encode(" supercalifragilistic").ids
    out = check(HfOracle(tok), directory, random_id_lists(tok.get_vocab_size(), seed=2))
    assert out["vocab_size"] == tok.get_vocab_size()
    assert out["bos"] == tok.token_to_id("<|begin_of_text|>")
    assert out["eos"] == tok.token_to_id("<|eot_id|>")  # from tokenizer_config.json


def test_qwen2_style(workdir):
    directory = workdir / "qwen2"
    tok = build_qwen2(directory)
    assert tok.token_to_id("café") in tok.encode("cafe\u0301 au lait").ids
    out = check(HfOracle(tok), directory, random_id_lists(tok.get_vocab_size(), seed=3))
    assert out["vocab_size"] == tok.get_vocab_size()


@pytest.mark.parametrize("model_type,llama_like", [("bpe", True), ("unigram", False),
                                                   ("bpe", False), ("unigram", True)])
def test_sentencepiece(workdir, model_type, llama_like):
    directory = workdir / f"sp_{model_type}_{llama_like}"
    sp = build_sentencepiece(directory, model_type, llama_like)
    byte_ids = [i for i in range(sp.get_piece_size()) if sp.is_byte(i)]
    assert len(byte_ids) == 256, "byte_fallback model without byte pieces"
    extra = random_id_lists(sp.get_piece_size(), seed=4)
    # Cut and broken characters: DecodeIds gives one U+FFFD per invalid byte.
    extra += sp_decode_extra(sp.get_piece_size(), [sp.piece_to_id(f"<0x{i:02X}>") for i in range(256)],
                             [sp.bos_id(), sp.eos_id()], seed=5)
    # Sequences that start with control / unknown / lone-space pieces probe
    # the dropped dummy-prefix space.
    space = sp.piece_to_id("▁")
    heads = [[sp.bos_id()], [sp.unk_id()], [space], [space, space], [sp.bos_id(), space]]
    extra += [h + ids for h in heads for ids in extra[:8]]
    oracle = SpOracle(sp, unigram=model_type == "unigram")
    out = check(oracle, directory, extra)
    if oracle.ties:
        print(f"{oracle.ties} encodings differ only by an equal-score unigram tie")
    assert out["vocab_size"] == sp.get_piece_size()
    assert out["bos"] == sp.bos_id() and out["eos"] == sp.eos_id()
    # Text outside the training alphabet went through byte fallback.
    assert any(i in byte_ids for i in sp.encode("🤖 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"))


def test_load_directory_prefers_tokenizer_json(workdir):
    directory = workdir / "prefers_json"
    tok = build_gpt2(directory, False)
    (directory / "tokenizer.model").write_bytes(b"not a sentencepiece model")
    out = run_driver(directory, ["hi there"], [])
    assert "error" not in out, out
    assert out["encode"][0]["ids"] == tok.encode("hi there").ids


def write_json(directory, spec):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(spec if isinstance(spec, str) else json.dumps(spec))
    return path


@pytest.mark.parametrize("change,expect", [
    (lambda s: s["model"].update(type="WordPiece"), ["model.type", "WordPiece"]),
    (lambda s: s.update(normalizer={"type": "Lowercase"}), ["normalizer", "Lowercase"]),
    (lambda s: s.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]}),
     ["pre_tokenizer", "Digits"]),
    (lambda s: s.update(decoder={"type": "Metaspace"}), ["decoder", "Metaspace"]),
    (lambda s: s["model"].update(byte_fallback=True), ["byte_fallback"]),
])
def test_unsupported_is_refused_by_name(workdir, change, expect):
    spec = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
            "post_processor": None, "decoder": {"type": "ByteLevel"}, "added_tokens": []}
    ok_path = write_json(workdir / "unsupported_base", spec)
    assert "error" not in run_driver(ok_path, ["ab"], [])
    change(spec)
    path = write_json(workdir / f"unsupported_{expect[-1]}", spec)
    out = run_driver(path, ["ab"], [])
    assert "error" in out
    for word in expect + [path]:
        assert word in out["error"], out["error"]


def test_errors_name_the_file(workdir):
    path = write_json(workdir / "badjson", "{not json")
    out = run_driver(path, [], [])
    assert path in out["error"] and "JSON" in out["error"]
    missing = str(workdir / "no_such_dir")
    out = run_driver(missing, [], [])
    assert missing in out["error"]
    out = run_driver(str(workdir / "no_such.model"), [], [])
    assert "no_such.model" in out["error"]


# ------------------------------------------- SentencePiece-converted tokenizer.json
#
# Hub layouts of Llama 2 / Mistral v0.1 / TinyLlama / Phi-3 / Gemma: a BPE
# tokenizer.model trained here with byte_fallback, turned into tokenizer.json
# by transformers' own conversion (LlamaTokenizer / GemmaTokenizer
# .from_pretrained on the .model, then save_pretrained), written beside it.
# transformers 5.23's LlamaConverter.converted() fails for BPE models (its
# extractor call is out of date), so the legacy Hub pipeline (Prepend +
# Replace normalizer, no pre-tokenizer) is built from the converter's own
# normalizer() / decoder() methods. The oracle is AutoTokenizer.


class AutoOracle:
    def __init__(self, tok):
        self.tok = tok

    def encode(self, text, special):
        return self.tok.encode(text, add_special_tokens=special)

    def decode(self, ids, skip):
        return self.tok.decode(ids, skip_special_tokens=skip)


def train_sp_bpe(directory, gemma=False):
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, "tokenizer")
    options = dict(model_prefix=prefix, model_type="bpe", vocab_size=600, byte_fallback=True,
                   character_coverage=0.995, num_threads=1, minloglevel=2, hard_vocab_limit=False,
                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                   split_digits=True, add_dummy_prefix=not gemma,
                   allow_whitespace_only_pieces=True)
    if gemma:  # Gemma's ids: <pad> 0, <eos> 1, <bos> 2, <unk> 3
        options.update(pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>",
                       eos_piece="<eos>", bos_piece="<bos>", user_defined_symbols=["<mask>"])
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus()), **options)
    return prefix + ".model"


def convert_with_transformers(directory, cls_name, **kwargs):
    import transformers
    cls = getattr(transformers, cls_name)
    tok = cls.from_pretrained(str(directory), **kwargs)
    tok.save_pretrained(str(directory))
    return tok


def sp_decode_extra(vocab_size, byte_ids, specials, seed):
    extra = random_id_lists(vocab_size, seed=seed)
    # Byte runs: complete and cut characters, runs broken by other tokens.
    rng = random.Random(seed)
    b = {i: byte_ids[i] for i in range(256)}
    cut = [[b[0xE6], b[0x97]], [b[0xE6], b[0x97], b[0xA5]], [b[0x41], b[0xE6]],
           [b[0xF0], b[0x9F], b[0x98], b[0x80], b[0xE6]], [b[0x20]], [b[0x20], b[0x20], b[0x41]]]
    extra += cut + [c + [rng.randrange(vocab_size)] + c for c in cut]
    extra += [[s] + c for s in specials for c in cut] + [c + [s] + c for s in specials for c in cut]
    return extra


def check_sp_layout(directory, oracle_tok):
    vocab = oracle_tok.get_vocab()
    byte_ids = [vocab[f"<0x{i:02X}>"] for i in range(256)]
    specials = sorted(oracle_tok.all_special_ids)
    extra = sp_decode_extra(len(oracle_tok), byte_ids, specials, seed=11)
    out = check(AutoOracle(oracle_tok), directory, extra)
    assert out["vocab_size"] == len(oracle_tok)
    assert out["bos"] == oracle_tok.bos_token_id
    # Text outside the training alphabet went through byte fallback.
    assert any(i in byte_ids for i in oracle_tok.encode("🤖 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"))
    return out


def test_llama2_converted_by_transformers(workdir):
    """tokenizer.json as transformers 5.23 writes it (Metaspace first, no
    normalizer), with the BOS template of Llama 2's add_bos_token."""
    directory = workdir / "llama2_v5"
    train_sp_bpe(directory)
    convert_with_transformers(directory, "LlamaTokenizer", add_bos_token=True)
    spec = json.load(open(directory / "tokenizer.json", encoding="utf-8"))
    assert spec["model"]["byte_fallback"] and spec["pre_tokenizer"]["type"] == "Metaspace"
    from transformers import AutoTokenizer
    check_sp_layout(directory, AutoTokenizer.from_pretrained(str(directory)))


def write_legacy_llama_json(directory):
    """The pipeline of the tokenizer.json files on the Hub for Llama 2,
    Mistral v0.1, TinyLlama, Phi-3: Prepend + Replace normalizer, no
    pre-tokenizer, Replace/ByteFallback/Fuse/Strip decoder, BOS template."""
    from tokenizers import Tokenizer as HfTokenizer
    from transformers.convert_slow_tokenizer import LlamaConverter

    class Slow:  # what LlamaConverter reads of the old slow LlamaTokenizer
        legacy = True
        add_prefix_space = True

    converter = LlamaConverter.__new__(LlamaConverter)
    converter.original_tokenizer = Slow()
    tok = HfTokenizer.from_file(str(directory / "tokenizer.json"))
    tok.normalizer = converter.normalizer(None)
    tok.pre_tokenizer = None
    tok.decoder = converter.decoder("▁", True)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.save(str(directory / "tokenizer.json"))
    spec = json.load(open(directory / "tokenizer.json", encoding="utf-8"))
    assert spec["normalizer"]["normalizers"][0]["type"] == "Prepend"
    assert spec["pre_tokenizer"] is None


def test_phi3_hub_layout(workdir):
    """Phi-3: a Llama-2 style tokenizer.json that transformers loads as is
    (model_type phi3 maps to TokenizersBackend)."""
    directory = workdir / "phi3"
    train_sp_bpe(directory)
    convert_with_transformers(directory, "LlamaTokenizer", add_bos_token=True)
    write_legacy_llama_json(directory)
    with open(directory / "config.json", "w") as f:
        json.dump({"model_type": "phi3"}, f)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(directory))
    assert tok.backend_tokenizer.normalizer is not None  # the file's pipeline
    check_sp_layout(directory, tok)


def test_gemma_converted_by_transformers(workdir):
    directory = workdir / "gemma"
    train_sp_bpe(directory, gemma=True)
    convert_with_transformers(directory, "GemmaTokenizer", add_bos_token=True)
    spec = json.load(open(directory / "tokenizer.json", encoding="utf-8"))
    assert spec["normalizer"]["type"] == "Replace" and spec["model"]["byte_fallback"]
    from transformers import AutoTokenizer
    check_sp_layout(directory, AutoTokenizer.from_pretrained(str(directory)))


@pytest.mark.parametrize("legacy", [None, True])
def test_llama2_hub_layout(workdir, legacy):
    """Llama 2 / TinyLlama on the Hub: Prepend + Replace tokenizer.json,
    tokenizer_class LlamaTokenizer, model_type llama. AutoTokenizer 5.23
    encodes with its LlamaTokenizer class pipeline (Metaspace, "first" unless
    legacy), not the file's normalizer; kvserve follows it."""
    directory = workdir / f"llama2_hub_{legacy}"
    train_sp_bpe(directory)
    convert_with_transformers(directory, "LlamaTokenizer")
    write_legacy_llama_json(directory)
    config = json.load(open(directory / "tokenizer_config.json"))
    config.update(add_bos_token=True, add_eos_token=False)
    config.pop("legacy", None)
    if legacy is not None:
        config["legacy"] = legacy
    with open(directory / "tokenizer_config.json", "w") as f:
        json.dump(config, f)
    with open(directory / "config.json", "w") as f:
        json.dump({"model_type": "llama"}, f)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(directory))
    assert tok.backend_tokenizer.normalizer is None  # the class pipeline, not the file's
    # The two pipelines differ on a leading space: the test can tell them apart.
    file_tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    assert file_tok.encode(" Hello").ids != tok.encode(" Hello")
    check_sp_layout(directory, tok)


def test_qwen3_layout_through_auto_tokenizer(workdir):
    """Qwen3: byte-level BPE as Qwen2, written by transformers' Qwen2Tokenizer
    (the class AutoTokenizer picks for model_type qwen3), checked against
    AutoTokenizer itself."""
    import transformers
    directory = workdir / "qwen3"
    build_qwen2(directory)
    tok = transformers.Qwen2Tokenizer.from_pretrained(str(directory), eos_token="<|im_end|>")
    tok.save_pretrained(str(directory))
    with open(directory / "config.json", "w") as f:
        json.dump({"model_type": "qwen3"}, f)
    auto = transformers.AutoTokenizer.from_pretrained(str(directory))
    assert type(auto).__name__ == "Qwen2Tokenizer"
    out = check(AutoOracle(auto), directory, random_id_lists(len(auto), seed=12))
    assert out["eos"] == auto.convert_tokens_to_ids("<|im_end|>")
    assert out["bos"] is None


def test_unusable_tokenizer_json_is_not_skipped(workdir):
    """tokenizer.json wins even when kvserve cannot use it: the error names
    the file and the field, and tokenizer.model beside it is not tried."""
    directory = workdir / "no_fallback"
    train_sp_bpe(directory)
    convert_with_transformers(directory, "LlamaTokenizer")
    spec = json.load(open(directory / "tokenizer.json", encoding="utf-8"))
    spec["pre_tokenizer"]["prepend_scheme"] = "sometimes"
    path = write_json(directory, spec)
    assert "error" not in run_driver(directory / "tokenizer.model", ["hi"], [])
    out = run_driver(directory, ["hi"], [])
    assert "error" in out
    for word in [path, "pre_tokenizer", "prepend_scheme", "sometimes"]:
        assert word in out["error"], out["error"]
