// The incremental detokenizer over arbitrary id sequences, the way a model
// may emit them (cut UTF-8, runs of byte tokens, special tokens anywhere).
// Input:
//   Byte()  bit 0: skip_special_tokens
//   Piece() token ids, little-endian u16 each, taken modulo the vocabulary
//   Rest()  tokenizer.json (empty: the byte tokenizer of the builtin models)
// Property: the streamed chunks are valid UTF-8 and add up to Decode's text.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/hf_bpe_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/fuzz/detokenize_check.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve::engine;
  kvserve::fuzz::FuzzInput in(data, size);
  const bool skip_special = in.Byte() & 1;
  const std::string_view id_bytes = in.Piece();
  const std::string tokenizer_json(in.Rest());

  std::unique_ptr<Tokenizer> tokenizer;
  if (tokenizer_json.empty()) {
    tokenizer = MakeByteTokenizer();
  } else {
    absl::StatusOr<HfBpeSpec> spec = ParseHfBpeSpec(tokenizer_json);
    if (!spec.ok()) return 0;
    absl::StatusOr<std::unique_ptr<Tokenizer>> made = MakeHfBpeTokenizer(*std::move(spec));
    if (!made.ok()) return 0;
    tokenizer = *std::move(made);
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < id_bytes.size(); i += 2) {
    const int32_t raw =
        static_cast<uint8_t>(id_bytes[i]) | (static_cast<uint8_t>(id_bytes[i + 1]) << 8);
    ids.push_back(raw % tokenizer->vocab_size());
  }
  kvserve::fuzz::CheckIncrementalDecode(*tokenizer, ids, skip_special);
  return 0;
}
