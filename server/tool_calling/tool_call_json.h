// The JSON pieces of tool-call text: where a JSON value written by the model
// ends, and what one call object ({"name": ..., "arguments": {...}}) holds.
//
// Pure functions; thread-safe; nothing throws past them.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace kvserve::server::tool_calling {

using Json = nlohmann::ordered_json;

// Deeper values are malformed (the model's text is untrusted; nlohmann's
// parser recurses per level).
inline constexpr int kMaxToolCallJsonDepth = 64;

// One parsed call: function.name and function.arguments, the arguments as
// compact JSON text of an object (OpenAI sends them as a string).
struct ToolCall {
  std::string name;
  std::string arguments;
  bool operator==(const ToolCall&) const = default;
};

enum class JsonScan {
  kComplete,    // a whole object or array: *end is one past its last byte
  kIncomplete,  // the text ends inside it (more text may complete it)
  kInvalid,     // not a JSON object / array, or nested too deep
};

// Scans the object or array that starts at text[begin] ('{' or '['; anything
// else is kInvalid) by its brackets and strings only: kComplete says where it
// ends, not that it is valid JSON (ParseJson says that).
JsonScan ScanJsonValue(std::string_view text, size_t begin, size_t* end);

// The value, or nullopt when the text is not exactly one valid JSON value.
std::optional<Json> ParseJson(std::string_view text);

// A call object: "name" a non-empty string, and "arguments" (or "parameters",
// Llama 3's key) an object, the JSON text of one, or absent ({}). Other keys
// are ignored. nullopt when it is not a call.
std::optional<ToolCall> CallFromJson(const Json& value);

}  // namespace kvserve::server::tool_calling
