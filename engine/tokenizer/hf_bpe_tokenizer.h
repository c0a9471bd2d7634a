// Hugging Face tokenizer.json with a BPE model, in one of two pipelines:
//  byte-level (GPT-2, Llama 3, Qwen2/Qwen3):
//   pre_tokenizer:  ByteLevel | Sequence[Split(Isolated)..., ByteLevel]
//                   (a Split is {"Regex"| "String"}, behavior Isolated,
//                   invert false; nested Sequences are flattened)
//   decoder:        ByteLevel | Sequence[ByteLevel]
//  SentencePiece-converted (Llama 2, Mistral v0.1, TinyLlama, Phi-3, Gemma):
//   pre_tokenizer:  null | Metaspace | Split({"String": s},
//                   MergedWithPrevious) (see metaspace.h)
//   decoder:        see hf_decoder.h (Replace, Metaspace, ByteFallback,
//                   Fuse, Strip)
//  both:
//   added tokens (split first, see added_tokens.h)
//   normalizer:     null | NFC | NFKC | Prepend | Replace(String) |
//                   Sequence of those (hf_normalizer.h)
//   model:          BPE (vocab, merges as "a b" or [a, b], ignore_merges,
//                   unk_token, fuse_unk, byte_fallback (SentencePiece
//                   pipeline only); no dropout, no
//                   continuing_subword_prefix / end_of_word_suffix)
//   post_processor: null | ByteLevel | TemplateProcessing (single) |
//                   RobertaProcessing | BertProcessing | Sequence of those
// Anything else is refused at load time, naming the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/added_tokens.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/hf_decoder.h"
#include "engine/tokenizer/hf_normalizer.h"
#include "engine/tokenizer/metaspace.h"
#include "engine/tokenizer/regex_splitter.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve::engine {

// What tokenizer.json (and tokenizer_config.json) say, in checked form.
struct HfBpeSpec {
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  BpeModel::Options bpe;
  std::vector<NormalizerStep> normalizer;
  bool byte_level = true;  // which pipeline (see the top of this file)
  // Byte-level pre-tokenization: the Split steps in order, then ByteLevel.
  std::vector<RegexSplitter> splits;
  bool add_prefix_space = false;  // ByteLevel: prepend ' ' to every piece lacking one
  bool byte_level_regex = false;  // ByteLevel use_regex: split with the GPT-2 regex
  // SentencePiece pre-tokenization: Metaspace, a literal split, or nothing.
  std::optional<MetaspaceOptions> metaspace;
  std::string split_merged_with_previous;
  HfDecoderSpec decoder;  // SentencePiece pipeline only
  std::vector<AddedToken> added_tokens;
  // add_special_tokens: the post-processor's ids around the text.
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
  std::optional<int32_t> bos;
  std::optional<int32_t> eos;
};

// Parses a tokenizer.json document. Error messages name the unsupported or
// malformed field but not the file (the caller adds it).
absl::StatusOr<HfBpeSpec> ParseHfBpeSpec(const std::string& json_text);

// Applies a tokenizer_config.json document the way transformers 5.23's
// AutoTokenizer does: bos_token / eos_token, add_bos_token / add_eos_token,
// and the LlamaTokenizer class rules of auto_tokenizer_rules.h.
// `model_type`: config.json's, or empty.
absl::Status ApplyTokenizerConfig(const std::string& json_text, const std::string& model_type,
                                  HfBpeSpec* spec);

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeHfBpeTokenizer(HfBpeSpec spec);

}  // namespace kvserve::engine
