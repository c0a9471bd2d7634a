// A tokenizer from a GGUF file's `tokenizer.ggml.*` metadata, built as
// transformers' GGUF loader builds it (so that its ids are those of the
// tokenizer.json transformers writes for the same file), and run by the
// tokenizer.json pipelines of hf_bpe_tokenizer.h:
//
//  model "gpt2" (byte-level BPE, e.g. SmolLM2, Qwen): vocabulary in the
//    byte-level alphabet (a token outside it is re-spelled byte by byte),
//    the file's merges, ByteLevel pre-tokenization with the GPT-2 regex, or
//    with the split regex `tokenizer.ggml.pre` names (llama3, qwen2, ...)
//    followed by ByteLevel without its regex; ByteLevel decoding.
//  model "llama" (SentencePiece BPE with byte fallback): merges from the file,
//    else derived from the vocabulary (every split of a token into two
//    tokens, best score first); LlamaTokenizer's pipeline (Metaspace
//    "first", decoder Replace, ByteFallback, Fuse, Strip), or for gemma,
//    gemma2 and gemma3 GemmaTokenizer's (Replace " " -> U+2581, a split on
//    " " merged with the previous piece; tokens of only whitespace
//    re-spelled as U+2581 runs; merges ranked by vocabulary position, since
//    Gemma's scores do not follow its merge order).
//  Both: tokens of type CONTROL (3) are special added tokens, USER_DEFINED
//    (4) plain added tokens; BOS / EOS by id; add_bos_token (default true
//    for "llama", false for "gpt2") and add_eos_token wrap the text.
// Anything else (another model, a merge that is not "a b") is an error
// naming the key.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/hf_bpe_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve::engine {

// The `tokenizer.ggml.*` values (read from the file by the loader).
struct GgufVocab {
  std::string architecture;  // general.architecture
  std::string model;         // tokenizer.ggml.model
  std::string pre;           // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string> tokens;
  std::vector<float> scores;        // empty, or one per token
  std::vector<int32_t> token_type;  // empty, or one per token
  std::vector<std::string> merges;  // "a b"; empty when absent
  std::optional<int32_t> bos, eos, unk;
  std::optional<bool> add_bos, add_eos;
};

// The tokenizer.json-equivalent spec (exposed for tests).
absl::StatusOr<HfBpeSpec> GgufTokenizerSpec(const GgufVocab& vocab);
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeGgufTokenizer(const GgufVocab& vocab);

}  // namespace kvserve::engine
