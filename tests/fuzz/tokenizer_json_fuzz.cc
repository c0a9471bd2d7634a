// tokenizer.json (and tokenizer_config.json) loading, then encoding and
// decoding fuzzed text with what loaded. Input:
//   Byte()  bit 0: add_special_tokens, bit 1: skip_special_tokens
//   Piece() the text to encode
//   Piece() tokenizer_config.json (empty: none)
//   Rest()  tokenizer.json
// Properties: encoded ids are inside the vocabulary, and streaming the ids
// back gives Decode's text in valid UTF-8 chunks.
#include <cstdint>
#include <string>

#include "engine/tokenizer/hf_bpe_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/fuzz/detokenize_check.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve::engine;
  kvserve::fuzz::FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  const std::string text(in.Piece());
  const std::string tokenizer_config(in.Piece());
  const std::string tokenizer_json(in.Rest());

  absl::StatusOr<HfBpeSpec> spec = ParseHfBpeSpec(tokenizer_json);
  if (!spec.ok()) return 0;
  if (!tokenizer_config.empty() && !ApplyTokenizerConfig(tokenizer_config, "llama", &*spec).ok()) {
    return 0;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = MakeHfBpeTokenizer(*std::move(spec));
  if (!tokenizer.ok()) return 0;

  absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(text, flags & 1);
  if (!ids.ok()) return 0;  // e.g. text that is not UTF-8
  for (int32_t id : *ids) {
    KVSERVE_FUZZ_CHECK(id >= 0 && id < (*tokenizer)->vocab_size(), std::to_string(id));
  }
  kvserve::fuzz::CheckIncrementalDecode(**tokenizer, *ids, flags & 2);
  return 0;
}
