"""Writes a randomly initialised Llama-architecture checkpoint of a known shape
as bf16 safetensors with a SentencePiece tokenizer, the way the Hub ships one,
so that kvserve loads it as is and llama.cpp's convert_hf_to_gguf.py converts
it (its vocabulary is padded to the config's vocab_size).

  make_checkpoint.py --shape smollm-135m|qwen2.5-0.5b --out DIR
"""
import argparse
import os
import random

import sentencepiece as spm
import torch
import transformers

SHAPES = {
    # HuggingFaceTB/SmolLM-135M
    "smollm-135m": dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                        num_key_value_heads=3, intermediate_size=1536, vocab_size=49152,
                        tie_word_embeddings=True, rope_theta=10000.0),
    # Qwen/Qwen2.5-0.5B's shape (as a Llama: the same matrices less the q/k/v bias)
    "qwen2.5-0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
                         tie_word_embeddings=True, rope_theta=1000000.0),
}


def train_tokenizer(out_dir):
    rng = random.Random(0)
    syllables = ["ka", "to", "ri", "me", "su", "la", "no", "vi", "de", "po", "an", "el", "ir"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    corpus = os.path.join(out_dir, "corpus.txt")
    with open(corpus, "w") as f:
        for _ in range(4000):
            f.write(" ".join(rng.choice(words) for _ in range(12)) + ".\n")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(out_dir, "tokenizer"),
                                   vocab_size=1000, model_type="bpe", byte_fallback=True,
                                   bos_id=1, eos_id=2, unk_id=0, minloglevel=2)
    os.remove(corpus)
    os.remove(os.path.join(out_dir, "tokenizer.vocab"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**SHAPES[args.shape], max_position_embeddings=4096,
                                      rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
                                      torch_dtype="bfloat16")
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(args.out, safe_serialization=True)
    train_tokenizer(args.out)
    print(f"{args.shape}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters -> {args.out}")


if __name__ == "__main__":
    main()
