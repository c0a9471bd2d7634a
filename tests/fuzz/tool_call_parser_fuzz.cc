// The tool-call parser (server/tool_calling/tool_call_parser.h) on any model
// text, whole and streamed. Input:
//   Byte()   the format (mod 4: hermes, llama3_json, mistral, json)
//   Byte()   the seed of the chunk sizes the text is streamed in (1..16 bytes)
//   Rest()   the model's text
// Properties: the streamed deltas add up to the whole parse (content, calls
// and malformed alike); every call has a name and arguments that parse as a
// JSON object; with no calls, the content is the whole text (nothing the
// model wrote is lost).
#include <cstdint>
#include <string>
#include <vector>

#include "server/tool_calling/tool_call_parser.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve::server::tool_calling;
  kvserve::fuzz::FuzzInput in(data, size);
  constexpr ToolCallFormat kFormats[] = {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                                         ToolCallFormat::kMistral, ToolCallFormat::kJson};
  const ToolCallFormat format = kFormats[in.Byte() % 4];
  uint32_t state = in.Byte() * 2654435761u + 1;
  const std::string text(in.Rest());

  const ParsedToolCalls whole = ParseToolCalls(format, text);
  ToolCallParser parser(format);
  std::string content;
  std::vector<ToolCall> calls;
  auto add = [&](ToolCallDelta d) {
    content += d.content;
    for (ToolCall& c : d.calls) calls.push_back(std::move(c));
  };
  for (size_t pos = 0; pos < text.size();) {
    state = state * 1664525u + 1013904223u;
    const size_t n = 1 + (state >> 24) % 16;
    add(parser.Feed(std::string_view(text).substr(pos, n)));
    pos += n;
  }
  add(parser.Finish());

  KVSERVE_FUZZ_CHECK(content == whole.content, content);
  KVSERVE_FUZZ_CHECK(calls == whole.calls, text);
  KVSERVE_FUZZ_CHECK(parser.malformed() == whole.malformed, text);
  for (const ToolCall& call : whole.calls) {
    KVSERVE_FUZZ_CHECK(!call.name.empty(), text);
    const std::optional<Json> arguments = ParseJson(call.arguments);
    KVSERVE_FUZZ_CHECK(arguments.has_value() && arguments->is_object(), call.arguments);
  }
  if (whole.calls.empty()) KVSERVE_FUZZ_CHECK(whole.content == text, whole.content);
  return 0;
}
