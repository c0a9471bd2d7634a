// The streaming-text property shared by the tokenizer and detokenizer
// targets: IncrementalDetokenizer's chunks are each valid UTF-8 and their
// concatenation equals Tokenizer::Decode of the same ids.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_input.h"

namespace kvserve::fuzz {

inline void CheckIncrementalDecode(const engine::Tokenizer& tokenizer, std::span<const int32_t> ids,
                                   bool skip_special) {
  engine::IncrementalDetokenizer detok(tokenizer, skip_special);
  std::string streamed;
  auto take = [&](const std::string& chunk) {
    KVSERVE_FUZZ_CHECK(engine::ToValidUtf8(chunk) == chunk, chunk);
    streamed += chunk;
  };
  for (int32_t id : ids) take(detok.Push(id));
  take(detok.Flush());
  const std::string whole = tokenizer.Decode(ids, skip_special);
  KVSERVE_FUZZ_CHECK(streamed == whole, streamed + " | " + whole);
}

}  // namespace kvserve::fuzz
