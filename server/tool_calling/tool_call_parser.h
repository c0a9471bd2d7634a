// Tool calls out of a model's text, whole or as it streams, in the formats
// chat templates teach models:
//
//   kHermes     <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any
//               number, text around them is content (Hermes 2 Pro, Qwen 2.5 / 3);
//               the last call's </tool_call> may be missing at the end of the text
//   kMistral    [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (or one
//               object) after the content (Mistral v0.3 style)
//   kLlama3Json the whole text is {"name": ..., "parameters": {...}} objects
//               separated by ";", optionally after <|python_tag|> (Llama 3.1-3.3)
//   kJson       the whole text is one call object or an array of them
//               ("arguments" or "parameters")
//
// Rules, the same whole and streaming:
// - a call is a JSON object with a non-empty string "name" and an object
//   "arguments" / "parameters" (or its JSON text; absent means {});
// - tool-call text that does not parse is content, as written: for the tagged
//   formats (Hermes, Mistral) from the marker that starts it to the end of the
//   text; for the whole-text formats (Llama 3, JSON) the whole text; the parser
//   records it (malformed()) and never fails;
// - content that is only whitespace is dropped when there are calls.
//
// Streaming: Feed() returns what can no longer change: content up to a
// possible marker, and calls once their text is complete (a Hermes call at
// its </tool_call>, a Mistral one at its closing bracket; the whole-text
// formats' calls at Finish()). Concatenating every Feed() and Finish() delta
// gives ParseToolCalls() of the concatenated text, however it was split.
//
// Not thread-safe; one parser per choice (the connection's strand owns it).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_calling/tool_call_json.h"

namespace kvserve::server::tool_calling {

enum class ToolCallFormat { kHermes, kLlama3Json, kMistral, kJson };

// "hermes", "llama3_json", "mistral", "json" (the --tool_call_parser names).
const char* ToolCallFormatName(ToolCallFormat format);
std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name);

// The text that starts the format's calls: "<tool_call>", "[TOOL_CALLS]",
// "<|python_tag|>"; empty for kJson.
std::string_view ToolCallMarker(ToolCallFormat format);

// The format a chat template teaches: "<tool_call>" in it is Hermes,
// "[TOOL_CALLS]" Mistral, "<|python_tag|>" or "ipython" Llama 3; else JSON.
ToolCallFormat DetectToolCallFormat(std::string_view chat_template);

// What a Feed() or Finish() adds: content text and calls, in text order.
struct ToolCallDelta {
  std::string content;
  std::vector<ToolCall> calls;
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format) : format_(format) {}

  ToolCallDelta Feed(std::string_view text);
  // Once, after the last Feed: decides everything held back.
  ToolCallDelta Finish();

  // Some tool-call text did not parse and became content.
  bool malformed() const { return malformed_; }
  int num_calls() const { return num_calls_; }

 private:
  void StepTagged(bool final, ToolCallDelta* out);
  void StepWhole(bool final, ToolCallDelta* out);
  void Step(bool final, ToolCallDelta* out);
  // Appends content, holding whitespace-only content until non-space text
  // follows (dropped at Finish when there are calls).
  void EmitContent(std::string_view text, ToolCallDelta* out);
  void EmitCall(ToolCall call, ToolCallDelta* out);

  const ToolCallFormat format_;
  std::string pending_;  // fed text not yet given out as content or calls
  // Set once tool-call text fails to parse: from there on, everything is content.
  bool content_only_ = false;
  bool malformed_ = false;
  bool content_started_ = false;  // content with a non-space byte was given out
  std::string held_space_;        // whitespace-only content before that
  int num_calls_ = 0;
  bool finished_ = false;
};

struct ParsedToolCalls {
  std::string content;  // empty: none (the response's content is null)
  std::vector<ToolCall> calls;
  bool malformed = false;
};

// The whole text at once (one Feed and Finish).
ParsedToolCalls ParseToolCalls(ToolCallFormat format, std::string_view text);

}  // namespace kvserve::server::tool_calling
