#include "server/http/openai_responses.h"

#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvserve::server::http {
namespace {

absl::Status Invalid(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": ", std::string(why)));
}

// The field, or null when absent or JSON null (null == absent).
const Json* Field(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::string> StringField(const Json& object, const char* key,
                                        std::string_view where) {
  const Json* v = Field(object, key);
  if (v == nullptr || !v->is_string()) {
    return Invalid(absl::StrCat(std::string(where), ".", key), "must be a string");
  }
  return v->get<std::string>();
}

// A message's content: a string, or text parts (input_text, output_text,
// refusal) joined with nothing between them.
absl::StatusOr<std::string> ContentText(const Json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return Invalid(where, "must be a string or an array of content parts");
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string part_where = absl::StrCat(where, "[", j, "]");
    const Json& part = content[j];
    if (!part.is_object()) return Invalid(part_where, "must be an object");
    KVSERVE_ASSIGN_OR_RETURN(const std::string type, StringField(part, "type", part_where));
    if (type == "input_text" || type == "output_text") {
      KVSERVE_ASSIGN_OR_RETURN(const std::string t, StringField(part, "text", part_where));
      text += t;
    } else if (type == "refusal") {
      KVSERVE_ASSIGN_OR_RETURN(const std::string t, StringField(part, "refusal", part_where));
      text += t;
    } else {
      return Invalid(absl::StrCat(part_where, ".type"),
                     absl::StrCat("\"", type, "\" is not implemented (text parts only)"));
    }
  }
  return text;
}

// Appends the chat messages of the Responses "input".
absl::Status AppendInput(const Json& input, Json* messages) {
  if (input.is_string()) {
    messages->push_back(Json{{"role", "user"}, {"content", input}});
    return absl::OkStatus();
  }
  if (!input.is_array()) return Invalid("input", "must be a string or an array of items");
  Json* calls = nullptr;  // the assistant message that consecutive function_call items join
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string where = absl::StrCat("input[", i, "]");
    const Json& item = input[i];
    if (!item.is_object()) return Invalid(where, "must be an object");
    const Json* type_field = Field(item, "type");
    if (type_field != nullptr && !type_field->is_string()) {
      return Invalid(absl::StrCat(where, ".type"), "must be a string");
    }
    const std::string type = type_field != nullptr ? type_field->get<std::string>() : "message";
    if (type == "function_call") {
      KVSERVE_ASSIGN_OR_RETURN(const std::string call_id, StringField(item, "call_id", where));
      KVSERVE_ASSIGN_OR_RETURN(const std::string name, StringField(item, "name", where));
      KVSERVE_ASSIGN_OR_RETURN(const std::string arguments, StringField(item, "arguments", where));
      if (calls == nullptr) {
        messages->push_back(
            Json{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", Json::array()}});
        calls = &messages->back()["tool_calls"];
      }
      calls->push_back(Json{{"id", call_id},
                            {"type", "function"},
                            {"function", {{"name", name}, {"arguments", arguments}}}});
      continue;
    }
    calls = nullptr;
    if (type == "function_call_output") {
      KVSERVE_ASSIGN_OR_RETURN(const std::string call_id, StringField(item, "call_id", where));
      const Json* output = Field(item, "output");
      if (output == nullptr) return Invalid(absl::StrCat(where, ".output"), "required");
      KVSERVE_ASSIGN_OR_RETURN(std::string text,
                               ContentText(*output, absl::StrCat(where, ".output")));
      messages->push_back(
          Json{{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(text)}});
      continue;
    }
    if (type != "message") {
      return Invalid(absl::StrCat(where, ".type"),
                     absl::StrCat("\"", type,
                                  "\" is not implemented (message, function_call and "
                                  "function_call_output items only)"));
    }
    KVSERVE_ASSIGN_OR_RETURN(std::string role, StringField(item, "role", where));
    if (role == "developer") role = "system";
    if (role != "user" && role != "system" && role != "assistant") {
      return Invalid(absl::StrCat(where, ".role"),
                     "must be \"user\", \"system\", \"developer\" or \"assistant\"");
    }
    const Json* content = Field(item, "content");
    if (content == nullptr) return Invalid(absl::StrCat(where, ".content"), "required");
    KVSERVE_ASSIGN_OR_RETURN(std::string text,
                             ContentText(*content, absl::StrCat(where, ".content")));
    messages->push_back(Json{{"role", role}, {"content", std::move(text)}});
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> ChatTools(const Json& tools) {
  if (!tools.is_array()) return Invalid("tools", "must be an array");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = absl::StrCat("tools[", i, "]");
    const Json& tool = tools[i];
    if (!tool.is_object()) return Invalid(where, "must be an object");
    KVSERVE_ASSIGN_OR_RETURN(const std::string type, StringField(tool, "type", where));
    if (type != "function") {
      return Invalid(absl::StrCat(where, ".type"),
                     absl::StrCat("\"", type, "\" is not implemented (function tools only)"));
    }
    KVSERVE_ASSIGN_OR_RETURN(const std::string name, StringField(tool, "name", where));
    Json function = Json{{"name", name}};
    for (const char* key : {"description", "parameters", "strict"}) {
      if (const Json* v = Field(tool, key); v != nullptr) function[key] = *v;
    }
    out.push_back(Json{{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

absl::StatusOr<Json> ChatToolChoice(const Json& choice) {
  if (choice.is_string()) return choice;  // none / auto / required: the chat parser checks
  if (!choice.is_object()) return Invalid("tool_choice", "must be a string or an object");
  const Json* type = Field(choice, "type");
  if (type == nullptr || *type != "function") {
    return Invalid("tool_choice.type", "must be \"function\" (other tool types are not served)");
  }
  KVSERVE_ASSIGN_OR_RETURN(const std::string name, StringField(choice, "name", "tool_choice"));
  return Json{{"type", "function"}, {"function", {{"name", name}}}};
}

// text.format -> the chat request's response_format (null: plain text).
absl::StatusOr<Json> ResponseFormat(const Json& text) {
  if (!text.is_object()) return Invalid("text", "must be an object");
  if (const Json* verbosity = Field(text, "verbosity");
      verbosity != nullptr && *verbosity != "medium") {
    return Invalid("text.verbosity", "is not implemented (only \"medium\")");
  }
  const Json* format = Field(text, "format");
  if (format == nullptr) return Json();
  if (!format->is_object()) return Invalid("text.format", "must be an object");
  KVSERVE_ASSIGN_OR_RETURN(const std::string type, StringField(*format, "type", "text.format"));
  if (type == "text") return Json();
  if (type == "json_object") return Json{{"type", "json_object"}};
  if (type != "json_schema") {
    return Invalid("text.format.type", "must be \"text\", \"json_object\" or \"json_schema\"");
  }
  Json schema = Json::object();
  for (const char* key : {"name", "schema", "strict", "description"}) {
    if (const Json* v = Field(*format, key); v != nullptr) schema[key] = *v;
  }
  if (!schema.contains("schema")) return Invalid("text.format.schema", "required");
  return Json{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
}

// Fields that need state kvserve does not keep, or features it does not
// serve: any value but the no-op one is a 400 naming the field.
absl::Status CheckUnservedFields(const Json& body) {
  const auto set = [&](const char* key) { return Field(body, key) != nullptr; };
  if (const Json* store = Field(body, "store"); store != nullptr && *store != false) {
    return Invalid("store", "responses are not stored (send false or leave it out)");
  }
  for (const char* key : {"previous_response_id", "conversation", "reasoning", "prompt",
                          "max_tool_calls", "top_logprobs"}) {
    if (set(key)) return Invalid(key, "is not implemented");
  }
  if (const Json* background = Field(body, "background");
      background != nullptr && *background != false) {
    return Invalid("background", "is not implemented");
  }
  if (const Json* include = Field(body, "include");
      include != nullptr && !(include->is_array() && include->empty())) {
    return Invalid("include", "is not implemented");
  }
  if (const Json* truncation = Field(body, "truncation");
      truncation != nullptr && *truncation != "disabled") {
    return Invalid("truncation", "is not implemented (only \"disabled\")");
  }
  if (const Json* options = Field(body, "stream_options");
      options != nullptr && !(options->is_object() && options->empty())) {
    return Invalid("stream_options", "is not implemented");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Json> ResponsesToChatBody(const Json& body) {
  KVSERVE_RETURN_IF_ERROR(CheckUnservedFields(body));
  Json chat = Json::object();
  Json messages = Json::array();
  if (const Json* instructions = Field(body, "instructions"); instructions != nullptr) {
    if (!instructions->is_string()) return Invalid("instructions", "must be a string");
    messages.push_back(Json{{"role", "system"}, {"content", *instructions}});
  }
  const Json* input = Field(body, "input");
  if (input == nullptr) return Invalid("input", "required");
  KVSERVE_RETURN_IF_ERROR(AppendInput(*input, &messages));
  chat["messages"] = std::move(messages);
  if (const Json* tools = Field(body, "tools"); tools != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(chat["tools"], ChatTools(*tools));
  }
  if (const Json* choice = Field(body, "tool_choice"); choice != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(chat["tool_choice"], ChatToolChoice(*choice));
  }
  if (const Json* text = Field(body, "text"); text != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(Json format, ResponseFormat(*text));
    if (!format.is_null()) chat["response_format"] = std::move(format);
  }
  if (const Json* max = Field(body, "max_output_tokens"); max != nullptr) chat["max_tokens"] = *max;
  for (const char* key : {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "top_k",
                          "min_p", "repetition_penalty", "seed", "ignore_eos"}) {
    if (const Json* v = Field(body, key); v != nullptr) chat[key] = *v;
  }
  return chat;
}

Json ResponseEcho(const Json& body) {
  const auto value = [&](const char* key, Json fallback) {
    const Json* v = Field(body, key);
    return v != nullptr ? *v : fallback;
  };
  Json echo = Json::object();
  echo["instructions"] = value("instructions", nullptr);
  echo["max_output_tokens"] = value("max_output_tokens", nullptr);
  echo["temperature"] = value("temperature", 1.0);
  echo["top_p"] = value("top_p", 1.0);
  echo["tools"] = value("tools", Json::array());
  echo["tool_choice"] = value("tool_choice", "auto");
  echo["parallel_tool_calls"] = value("parallel_tool_calls", true);
  echo["text"] = value("text", Json{{"format", {{"type", "text"}}}});
  echo["metadata"] = value("metadata", Json::object());
  echo["truncation"] = "disabled";
  echo["store"] = false;
  echo["background"] = false;
  echo["previous_response_id"] = nullptr;
  echo["reasoning"] = nullptr;
  echo["user"] = value("user", nullptr);
  return echo;
}

}  // namespace kvserve::server::http
