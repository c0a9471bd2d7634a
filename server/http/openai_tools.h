// Tool calling on /v1/chat/completions: the request's "tools", "tool_choice"
// and "parallel_tool_calls", and the conversation's tool messages as chat
// templates expect them.
//
//   tool_choice "none"      tools reach the template; the text is not parsed
//   tool_choice "auto"      (the default with tools) unconstrained; calls are
//                           parsed out of the text afterwards
//   tool_choice "required", {"type": "function", "function": {"name": n}}
//                           the output is constrained (a structural tag,
//                           engine/grammar/constraint.h) to at least one call
//                           (exactly one of n) in the format the text is
//                           parsed in, its arguments valid under the
//                           function's "parameters" schema
//   parallel_tool_calls     false: at most one call (the first) is returned,
//                           and a forced output stops after one
//
// Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/grammar/constraint.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/tool_calling/tool_call_parser.h"

namespace kvserve::server::http {

using Json = nlohmann::ordered_json;

// One function of "tools".
struct ToolFunction {
  std::string name;  // [a-zA-Z0-9_-]{1,64}, as OpenAI requires
  Json parameters;   // a JSON Schema object; {"type": "object", "properties": {}} when absent
};

// How a request's output is read for tool calls.
struct ToolCalling {
  tool_calling::ToolCallFormat format = tool_calling::ToolCallFormat::kJson;
  bool forced = false;    // "required" or a named function: the output is constrained
  int32_t max_calls = 0;  // 0: any number; 1 with parallel_tool_calls false
};

// Parses the tool fields of a chat request. nullopt: nothing is parsed (no
// tools, or tool_choice "none"). A forced choice sets *constraint; one that
// is already set (response_format, ...) is an error. `server_format` is the
// format the daemon reads this model's calls in (--tool_call_parser).
absl::StatusOr<std::optional<ToolCalling>> ParseToolCalling(
    const Json& body, tool_calling::ToolCallFormat server_format,
    std::optional<engine::grammar::Constraint>* constraint);

// The constraint of a forced choice over `functions` (the named one alone,
// or all of "tools" for "required"): `format`'s call text with each call's
// arguments under its schema. *parse_format: the format that output is then
// parsed in (Mistral's [TOOL_CALLS] is a special token no grammar can
// emit, so Mistral and JSON are forced as a JSON array and parsed as JSON).
absl::StatusOr<engine::grammar::Constraint> ForcedToolCallConstraint(
    const std::vector<ToolFunction>& functions, tool_calling::ToolCallFormat format,
    bool stop_after_first, tool_calling::ToolCallFormat* parse_format);

// Whether `format`'s marker encodes to one special token of `tokenizer`
// (which the detokenizer drops unless skip_special_tokens is false).
bool MarkerIsSpecialToken(tool_calling::ToolCallFormat format, const engine::Tokenizer* tokenizer);

// One message as templates expect it (vLLM's conversion): each
// tool_calls[i].function.arguments given as JSON text of an object becomes
// that object (Hub templates iterate it or write it with tojson).
void PrepareToolCallMessage(Json* message);

// message.tool_calls of a response: [{"id": "call_...", "type": "function",
// "function": {"name", "arguments"}}]; ids from RandomToolCallId.
std::string RandomToolCallId();

}  // namespace kvserve::server::http
