// StopChecker over the byte tokenizer of the builtin models (ids 0..255 are
// bytes, then <bos>, <eos>), so any byte sequence, cut UTF-8 included, can be
// generated. Input:
//   Byte()        flags: bit 0 ignore_eos, bit 1 skip_special_tokens
//   Byte()        number of stop strings (mod 5), then that many Piece()s
//                 (made valid UTF-8, as the API requires)
//   Byte()        max_tokens (1..256); Byte() min_tokens (<= max_tokens)
//   Byte()        one extra stop token id (0..255; 0: none)
//   Rest()        output ids, little-endian u16 each, modulo 258
// Properties: emitted text never contains a stop string once min_tokens is
// reached; a request stopped by a stop string emitted exactly the text
// before it; an unfinished request's emitted text plus Flush() is the whole
// decoded text; the finish reason matches the token or the count.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "scheduler/stop_checker.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvserve::scheduler::FinishReason;
  static const std::unique_ptr<kvserve::engine::Tokenizer> tokenizer =
      kvserve::engine::MakeByteTokenizer();
  kvserve::fuzz::FuzzInput in(data, size);
  kvserve::scheduler::StopParams params;
  const uint8_t flags = in.Byte();
  params.ignore_eos = flags & 1;
  params.skip_special_tokens = flags & 2;
  const int num_stops = in.Byte() % 5;
  for (int i = 0; i < num_stops; ++i) {
    const std::string_view stop = in.Piece();
    // Requests carry only valid UTF-8 stop strings (request_convert checks).
    const std::string valid = kvserve::engine::ToValidUtf8(stop);
    if (!valid.empty() && valid.size() <= 64) params.stop_strings.push_back(valid);
  }
  params.max_tokens = 1 + in.Byte();
  params.min_tokens = in.Byte() % (params.max_tokens + 1);
  if (const uint8_t extra = in.Byte(); extra != 0) params.stop_token_ids.push_back(extra);
  const std::string_view id_bytes = in.Rest();

  const std::vector<int32_t> eos = {*tokenizer->eos_token_id()};
  kvserve::scheduler::StopChecker checker(params, eos, tokenizer.get());
  std::vector<int32_t> ids;
  std::string emitted;
  FinishReason reason = FinishReason::kNone;
  kvserve::scheduler::StopChecker::Result last;
  for (size_t i = 0; i + 1 < id_bytes.size() && reason == FinishReason::kNone; i += 2) {
    const int32_t id =
        (static_cast<uint8_t>(id_bytes[i]) | (static_cast<uint8_t>(id_bytes[i + 1]) << 8)) % 258;
    ids.push_back(id);
    last = checker.Append(id, static_cast<int32_t>(ids.size()));
    emitted += last.text;
    reason = last.reason;
    KVSERVE_FUZZ_CHECK(static_cast<int32_t>(ids.size()) <= params.max_tokens, "past max_tokens");
  }
  if (params.min_tokens == 0 && reason != FinishReason::kStopString) {
    for (const std::string& stop : params.stop_strings) {
      KVSERVE_FUZZ_CHECK(emitted.find(stop) == std::string::npos, emitted + " has " + stop);
    }
  }
  const std::string whole = tokenizer->Decode(ids, params.skip_special_tokens);
  switch (reason) {
    case FinishReason::kNone:
      emitted += checker.Flush();
      KVSERVE_FUZZ_CHECK(emitted == whole, emitted + " | " + whole);
      break;
    case FinishReason::kStopString: {
      // A stop token's text is not output, and the flush it causes may end a
      // cut character (U+FFFD) that completes a stop string: then the text
      // to compare is the one without that last token (the token's byte can
      // itself complete the character in `whole`).
      const bool after_stop_token =
          ids.back() == eos[0] ||
          (!params.stop_token_ids.empty() && ids.back() == params.stop_token_ids[0]);
      const std::string before_last = tokenizer->Decode(
          std::vector<int32_t>(ids.begin(), ids.end() - 1), params.skip_special_tokens);
      KVSERVE_FUZZ_CHECK(
          whole.starts_with(emitted + last.stop_string) ||
              (after_stop_token && before_last.starts_with(emitted + last.stop_string)),
          emitted + " | " + whole);
      break;
    }
    case FinishReason::kStopToken:
      KVSERVE_FUZZ_CHECK(last.stop_token == ids.back(), "the stop token is the last id");
      break;
    case FinishReason::kLength:
      KVSERVE_FUZZ_CHECK(static_cast<int32_t>(ids.size()) == params.max_tokens, "length at max");
      KVSERVE_FUZZ_CHECK(whole.starts_with(emitted), emitted + " | " + whole);
      break;
    default:
      KVSERVE_FUZZ_CHECK(false, "unexpected finish reason");
  }
  return 0;
}
