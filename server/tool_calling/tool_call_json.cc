#include "server/tool_calling/tool_call_json.h"

namespace kvserve::server::tool_calling {

JsonScan ScanJsonValue(std::string_view text, size_t begin, size_t* end) {
  if (begin >= text.size() || (text[begin] != '{' && text[begin] != '[')) {
    return JsonScan::kInvalid;
  }
  // Invariant: `closers` holds the closing bracket of every open level,
  // innermost last; a close that does not match it is invalid.
  std::string closers;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '{':
      case '[':
        if (closers.size() >= static_cast<size_t>(kMaxToolCallJsonDepth)) return JsonScan::kInvalid;
        closers.push_back(c == '{' ? '}' : ']');
        break;
      case '}':
      case ']':
        if (closers.empty() || closers.back() != c) return JsonScan::kInvalid;
        closers.pop_back();
        if (closers.empty()) {
          *end = i + 1;
          return JsonScan::kComplete;
        }
        break;
      default:
        break;
    }
  }
  return JsonScan::kIncomplete;
}

std::optional<Json> ParseJson(std::string_view text) {
  // Depth first: the parser recurses once per level.
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxToolCallJsonDepth) return std::nullopt;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return std::nullopt;
  return value;
}

std::optional<ToolCall> CallFromJson(const Json& value) {
  if (!value.is_object()) return std::nullopt;
  const auto name = value.find("name");
  if (name == value.end() || !name->is_string() || name->get<std::string>().empty()) {
    return std::nullopt;
  }
  auto arguments = value.find("arguments");
  if (arguments == value.end()) arguments = value.find("parameters");
  ToolCall call{.name = name->get<std::string>(), .arguments = "{}"};
  if (arguments == value.end() || arguments->is_null()) return call;
  Json object;
  if (arguments->is_object()) {
    object = *arguments;
  } else if (arguments->is_string()) {
    std::optional<Json> parsed = ParseJson(arguments->get<std::string>());
    if (!parsed.has_value() || !parsed->is_object()) return std::nullopt;
    object = *std::move(parsed);
  } else {
    return std::nullopt;
  }
  // Replacement, never an exception, for invalid UTF-8 inside the strings.
  call.arguments = object.dump(-1, ' ', false, Json::error_handler_t::replace);
  return call;
}

}  // namespace kvserve::server::tool_calling
