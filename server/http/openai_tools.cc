#include "server/http/openai_tools.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/request_convert.h"

namespace kvserve::server::http {
namespace {

using engine::grammar::Constraint;
using engine::grammar::ConstraintKind;
using tool_calling::ToolCallFormat;

absl::Status Invalid(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": ", std::string(why)));
}

const Json* Field(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

bool ValidFunctionName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<std::vector<ToolFunction>> ParseTools(const Json& tools) {
  if (!tools.is_array()) return Invalid("tools", "must be an array of tools");
  std::vector<ToolFunction> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string param = absl::StrCat("tools[", i, "]");
    const Json& tool = tools[i];
    if (!tool.is_object()) return Invalid(param, "must be an object");
    const Json* type = Field(tool, "type");
    if (type == nullptr || !(*type == "function")) {
      return Invalid(param + ".type", "only \"function\" tools are implemented");
    }
    const Json* function = Field(tool, "function");
    if (function == nullptr || !function->is_object()) {
      return Invalid(param + ".function", "required, an object");
    }
    const Json* name = Field(*function, "name");
    if (name == nullptr || !name->is_string() || !ValidFunctionName(name->get<std::string>())) {
      return Invalid(param + ".function.name",
                     "must be a string of 1 to 64 letters, digits, underscores and dashes");
    }
    ToolFunction f{.name = name->get<std::string>(),
                   .parameters = Json{{"type", "object"}, {"properties", Json::object()}}};
    if (const Json* parameters = Field(*function, "parameters"); parameters != nullptr) {
      if (!parameters->is_object()) {
        return Invalid(param + ".function.parameters", "must be a JSON Schema object");
      }
      f.parameters = *parameters;
    }
    for (const ToolFunction& seen : out) {
      if (seen.name == f.name) {
        return Invalid(param + ".function.name", absl::StrCat("\"", f.name, "\" is given twice"));
      }
    }
    out.push_back(std::move(f));
  }
  return out;
}

// The structural tag's call text, per format: what comes before a call's
// arguments, after them, and between two calls; Mistral and JSON inside [ ].
struct CallShape {
  std::string begin_before_name;
  std::string begin_after_name;
  std::string end;
  std::string separator;
  bool in_array = false;
};

CallShape ShapeOf(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return {"<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "}\n</tool_call>", "\n", false};
    case ToolCallFormat::kLlama3Json:
      return {"{\"name\": \"", "\", \"parameters\": ", "}", "; ", false};
    case ToolCallFormat::kMistral:
    case ToolCallFormat::kJson:
      break;
  }
  return {"{\"name\": \"", "\", \"arguments\": ", "}", ", ", true};
}

}  // namespace

std::string RandomToolCallId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrCat("call_", absl::StrFormat("%016x%08x", rng(), rng() & 0xffffffffu));
}

absl::StatusOr<Constraint> ForcedToolCallConstraint(const std::vector<ToolFunction>& functions,
                                                    ToolCallFormat format, bool stop_after_first,
                                                    ToolCallFormat* parse_format) {
  const CallShape shape = ShapeOf(format);
  *parse_format = shape.in_array ? ToolCallFormat::kJson : format;
  Json tags = Json::array();
  for (size_t i = 0; i < functions.size(); ++i) {
    const ToolFunction& f = functions[i];
    // Compact JSON arguments (a structural tag's own json_schema content
    // allows free whitespace, which a small model can loop on).
    absl::StatusOr<std::string> ebnf = engine::grammar::JsonSchemaEbnf(f.parameters.dump(), true);
    if (!ebnf.ok()) {
      return Invalid(absl::StrCat("tools.", f.name, ".parameters"),
                     std::string(ebnf.status().message()));
    }
    tags.push_back(Json{{"type", "tag"},
                        {"begin", shape.begin_before_name + f.name + shape.begin_after_name},
                        {"content", Json{{"type", "grammar"}, {"grammar", *ebnf}}},
                        {"end", shape.end}});
  }
  Json calls = Json{{"type", "tags_with_separator"},
                    {"tags", std::move(tags)},
                    {"separator", shape.separator},
                    {"at_least_one", true},
                    {"stop_after_first", stop_after_first}};
  Json format_json = std::move(calls);
  if (shape.in_array) {
    format_json = Json{{"type", "sequence"},
                       {"elements", Json::array({Json{{"type", "const_string"}, {"value", "["}},
                                                 std::move(format_json),
                                                 Json{{"type", "const_string"}, {"value", "]"}}})}};
  }
  Constraint c;
  c.kind = ConstraintKind::kStructuralTag;
  c.text = Json{{"type", "structural_tag"}, {"format", std::move(format_json)}}.dump();
  return c;
}

absl::StatusOr<std::optional<ToolCalling>> ParseToolCalling(const Json& body,
                                                            ToolCallFormat server_format,
                                                            std::optional<Constraint>* constraint) {
  const Json* tools_json = Field(body, "tools");
  std::vector<ToolFunction> tools;
  if (tools_json != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(tools, ParseTools(*tools_json));
  }
  bool parallel = true;
  if (const Json* p = Field(body, "parallel_tool_calls"); p != nullptr) {
    if (!p->is_boolean()) return Invalid("parallel_tool_calls", "must be a boolean");
    parallel = p->get<bool>();
  }
  const Json* choice = Field(body, "tool_choice");
  std::string mode = tools.empty() ? "none" : "auto";  // OpenAI's defaults
  std::vector<ToolFunction> forced;
  if (choice != nullptr && choice->is_string()) {
    mode = choice->get<std::string>();
    if (mode != "none" && mode != "auto" && mode != "required") {
      return Invalid("tool_choice",
                     absl::StrCat("must be \"none\", \"auto\", \"required\" or {\"type\": "
                                  "\"function\", \"function\": {\"name\": ...}}, got \"",
                                  mode, "\""));
    }
    if (mode == "required") forced = tools;
  } else if (choice != nullptr) {
    const Json* type = choice->is_object() ? Field(*choice, "type") : nullptr;
    const Json* function = choice->is_object() ? Field(*choice, "function") : nullptr;
    const Json* name =
        function != nullptr && function->is_object() ? Field(*function, "name") : nullptr;
    if (type == nullptr || !(*type == "function") || name == nullptr || !name->is_string()) {
      return Invalid("tool_choice",
                     "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                     "\"function\": {\"name\": ...}}");
    }
    mode = "named";
    for (const ToolFunction& f : tools) {
      if (f.name == name->get<std::string>()) forced.push_back(f);
    }
    if (forced.empty()) {
      return Invalid("tool_choice.function.name",
                     absl::StrCat("\"", name->get<std::string>(), "\" is not one of \"tools\""));
    }
  }
  // "auto" over no tools has nothing to call: plain text, as vLLM serves it.
  if (mode == "none" || (mode == "auto" && tools.empty())) return std::optional<ToolCalling>();
  if (tools.empty()) {
    return Invalid("tool_choice", absl::StrCat("\"", mode, "\" needs a non-empty \"tools\""));
  }
  ToolCalling out{
      .format = server_format, .forced = !forced.empty(), .max_calls = parallel ? 0 : 1};
  if (out.forced) {
    if (constraint->has_value()) {
      return Invalid("tool_choice",
                     "a forced tool call is a constraint, and a request takes one; "
                     "response_format (or structured_outputs, guided_*) already sets one");
    }
    const bool one = mode == "named" || !parallel;
    KVSERVE_ASSIGN_OR_RETURN(Constraint c,
                             ForcedToolCallConstraint(forced, server_format, one, &out.format));
    KVSERVE_RETURN_IF_ERROR(CheckConstraint(c, "tools"));
    *constraint = std::move(c);
  }
  return std::optional<ToolCalling>(out);
}

bool MarkerIsSpecialToken(ToolCallFormat format, const engine::Tokenizer* tokenizer) {
  const std::string_view marker = tool_calling::ToolCallMarker(format);
  if (tokenizer == nullptr || marker.empty()) return false;
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(marker, false);
  return ids.ok() && ids->size() == 1 && tokenizer->IsSpecial((*ids)[0]);
}

void PrepareToolCallMessage(Json* message) {
  const auto calls = message->find("tool_calls");
  if (calls == message->end() || !calls->is_array()) return;
  for (Json& call : *calls) {
    if (!call.is_object()) continue;
    const auto function = call.find("function");
    if (function == call.end() || !function->is_object()) continue;
    const auto arguments = function->find("arguments");
    if (arguments == function->end() || !arguments->is_string()) continue;
    std::optional<tool_calling::Json> parsed =
        tool_calling::ParseJson(arguments->get<std::string>());
    if (parsed.has_value() && parsed->is_object()) *arguments = *std::move(parsed);
  }
}

}  // namespace kvserve::server::http
