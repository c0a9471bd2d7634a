// Hugging Face tokenizer.json with a byte-level BPE model (GPT-2, Llama-3,
// Qwen2 style). Supported pipeline, anything else is refused at load time:
//   added tokens (split first, see added_tokens.h)
//   normalizer:     null | NFC | Sequence of those
//   pre_tokenizer:  ByteLevel | Sequence[Split(Isolated)..., ByteLevel]
//                   (a Split is {"Regex"| "String"}, behavior Isolated,
//                   invert false; nested Sequences are flattened)
//   model:          BPE (vocab, merges as "a b" or [a, b], ignore_merges,
//                   unk_token, fuse_unk; no dropout, no byte_fallback, no
//                   continuing_subword_prefix / end_of_word_suffix)
//   post_processor: null | ByteLevel | TemplateProcessing (single) |
//                   RobertaProcessing | BertProcessing | Sequence of those
//   decoder:        ByteLevel | Sequence[ByteLevel]
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
#include "engine/tokenizer/regex_splitter.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve::engine {

// What tokenizer.json (and tokenizer_config.json) say, in checked form.
struct HfBpeSpec {
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  BpeModel::Options bpe;
  bool nfc = false;
  // Pre-tokenization: the Split steps in order, then ByteLevel.
  std::vector<RegexSplitter> splits;
  bool add_prefix_space = false;  // ByteLevel: prepend ' ' to every piece lacking one
  bool byte_level_regex = false;  // ByteLevel use_regex: split with the GPT-2 regex
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

// Applies bos_token / eos_token of a tokenizer_config.json document.
absl::Status ApplyTokenizerConfig(const std::string& json_text, HfBpeSpec* spec);

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeHfBpeTokenizer(HfBpeSpec spec);

}  // namespace kvserve::engine
