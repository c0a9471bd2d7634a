#include "server/http/openai_constraint.h"

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/request_convert.h"

namespace kvserve::server::http {
namespace {

using engine::grammar::Constraint;
using engine::grammar::ConstraintKind;

absl::Status Invalid(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": ", std::string(why)));
}

// The field, or null when absent or JSON null (null == absent).
const Json* Field(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::string> String(const Json& v, std::string_view field) {
  if (!v.is_string()) return Invalid(field, "must be a string");
  return v.get<std::string>();
}

// A schema given as a JSON object, or as JSON text (vLLM takes both).
absl::StatusOr<std::string> Schema(const Json& v, std::string_view field) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (!v.is_string()) return Invalid(field, "must be a JSON Schema object or its JSON text");
  return v.get<std::string>();
}

absl::StatusOr<std::vector<std::string>> Choices(const Json& v, std::string_view field) {
  if (!v.is_array()) return Invalid(field, "must be an array of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      return Invalid(absl::StrCat(std::string(field), "[", i, "]"), "must be a string");
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

absl::StatusOr<std::optional<Constraint>> ResponseFormat(const Json& format) {
  if (!format.is_object()) return Invalid("response_format", "must be an object");
  const Json* type = Field(format, "type");
  if (type == nullptr || !type->is_string()) {
    return Invalid("response_format.type", "must be \"text\", \"json_object\" or \"json_schema\"");
  }
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  Constraint c;
  if (t == "json_object") {
    c.kind = ConstraintKind::kJsonObject;
    return c;
  }
  if (t != "json_schema") {
    return Invalid("response_format.type",
                   absl::StrCat("\"", t,
                                "\" is not implemented (\"text\", \"json_object\", "
                                "\"json_schema\")"));
  }
  const Json* spec = Field(format, "json_schema");
  if (spec == nullptr || !spec->is_object()) {
    return Invalid("response_format.json_schema", "required, an object");
  }
  const Json* schema = Field(*spec, "schema");
  if (schema == nullptr) return Invalid("response_format.json_schema.schema", "required");
  c.kind = ConstraintKind::kJsonSchema;
  KVSERVE_ASSIGN_OR_RETURN(c.text, Schema(*schema, "response_format.json_schema.schema"));
  if (const Json* strict = Field(*spec, "strict"); strict != nullptr) {
    if (!strict->is_boolean()) {
      return Invalid("response_format.json_schema.strict", "must be a boolean");
    }
    c.strict = strict->get<bool>();
  }
  return c;
}

absl::StatusOr<std::optional<Constraint>> StructuredOutputs(const Json& so) {
  if (!so.is_object()) return Invalid("structured_outputs", "must be an object");
  for (const char* key : {"structural_tag", "whitespace_pattern"}) {
    if (Field(so, key) != nullptr) {
      return Invalid(absl::StrCat("structured_outputs.", key), "is not implemented");
    }
  }
  if (const Json* ws = Field(so, "disable_any_whitespace"); ws != nullptr && !(*ws == true)) {
    return Invalid("structured_outputs.disable_any_whitespace",
                   "only true is implemented: kvserve generates JSON without free whitespace");
  }
  Constraint c;
  if (const Json* extra = Field(so, "disable_additional_properties"); extra != nullptr) {
    if (!extra->is_boolean()) {
      return Invalid("structured_outputs.disable_additional_properties", "must be a boolean");
    }
    c.strict = extra->get<bool>();
  }
  int set = 0;
  if (const Json* v = Field(so, "json"); v != nullptr) {
    ++set;
    c.kind = ConstraintKind::kJsonSchema;
    KVSERVE_ASSIGN_OR_RETURN(c.text, Schema(*v, "structured_outputs.json"));
  }
  if (const Json* v = Field(so, "regex"); v != nullptr) {
    ++set;
    c.kind = ConstraintKind::kRegex;
    KVSERVE_ASSIGN_OR_RETURN(c.text, String(*v, "structured_outputs.regex"));
  }
  if (const Json* v = Field(so, "choice"); v != nullptr) {
    ++set;
    c.kind = ConstraintKind::kChoice;
    KVSERVE_ASSIGN_OR_RETURN(c.choices, Choices(*v, "structured_outputs.choice"));
  }
  if (const Json* v = Field(so, "grammar"); v != nullptr) {
    ++set;
    c.kind = ConstraintKind::kGrammar;
    KVSERVE_ASSIGN_OR_RETURN(c.text, String(*v, "structured_outputs.grammar"));
  }
  if (const Json* v = Field(so, "json_object"); v != nullptr) {
    if (!v->is_boolean()) return Invalid("structured_outputs.json_object", "must be a boolean");
    if (v->get<bool>()) {
      ++set;
      c.kind = ConstraintKind::kJsonObject;
    }
  }
  if (set > 1) {
    return Invalid("structured_outputs",
                   "set only one of json, regex, choice, grammar and json_object");
  }
  if (set == 0) {
    return Invalid("structured_outputs", "set one of json, regex, choice, grammar and json_object");
  }
  return c;
}

// vLLM's older top-level names.
absl::StatusOr<std::optional<Constraint>> Guided(const Json& body, const char** field) {
  std::optional<Constraint> out;
  int set = 0;
  Constraint c;
  if (const Json* v = Field(body, "guided_json"); v != nullptr) {
    ++set;
    *field = "guided_json";
    c.kind = ConstraintKind::kJsonSchema;
    KVSERVE_ASSIGN_OR_RETURN(c.text, Schema(*v, "guided_json"));
  }
  if (const Json* v = Field(body, "guided_regex"); v != nullptr) {
    ++set;
    *field = "guided_regex";
    c.kind = ConstraintKind::kRegex;
    KVSERVE_ASSIGN_OR_RETURN(c.text, String(*v, "guided_regex"));
  }
  if (const Json* v = Field(body, "guided_choice"); v != nullptr) {
    ++set;
    *field = "guided_choice";
    c.kind = ConstraintKind::kChoice;
    KVSERVE_ASSIGN_OR_RETURN(c.choices, Choices(*v, "guided_choice"));
  }
  if (const Json* v = Field(body, "guided_grammar"); v != nullptr) {
    ++set;
    *field = "guided_grammar";
    c.kind = ConstraintKind::kGrammar;
    KVSERVE_ASSIGN_OR_RETURN(c.text, String(*v, "guided_grammar"));
  }
  if (set > 1) {
    return Invalid("guided_json",
                   "set only one of guided_json, guided_regex, guided_choice and "
                   "guided_grammar");
  }
  if (set == 1) out = std::move(c);
  return out;
}

// The field CheckConstraint's errors name.
std::string CheckedField(const Constraint& c, std::string_view source) {
  if (source != "structured_outputs") return std::string(source);
  switch (c.kind) {
    case ConstraintKind::kJsonSchema:
      return "structured_outputs.json";
    case ConstraintKind::kRegex:
      return "structured_outputs.regex";
    case ConstraintKind::kChoice:
      return "structured_outputs.choice";
    case ConstraintKind::kGrammar:
      return "structured_outputs.grammar";
    case ConstraintKind::kJsonObject:
      return "structured_outputs.json_object";
    case ConstraintKind::kStructuralTag:
      break;  // never parsed from structured_outputs (tool calls build it)
  }
  return std::string(source);
}

}  // namespace

absl::StatusOr<std::optional<Constraint>> ParseConstraint(const Json& body) {
  if (const Json* backend = Field(body, "guided_decoding_backend"); backend != nullptr) {
    if (!(*backend == "xgrammar") && !(*backend == "auto")) {
      return Invalid("guided_decoding_backend", "only \"xgrammar\" (or \"auto\") is implemented");
    }
  }
  for (const char* key : {"guided_whitespace_pattern", "guided_json_object"}) {
    if (Field(body, key) != nullptr) return Invalid(key, "is not implemented");
  }
  std::vector<std::pair<std::string, Constraint>> found;
  if (const Json* format = Field(body, "response_format"); format != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(std::optional<Constraint> c, ResponseFormat(*format));
    if (c) {
      found.emplace_back(c->kind == ConstraintKind::kJsonSchema
                             ? "response_format.json_schema.schema"
                             : "response_format",
                         *std::move(c));
    }
  }
  if (const Json* so = Field(body, "structured_outputs"); so != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(std::optional<Constraint> c, StructuredOutputs(*so));
    found.emplace_back(CheckedField(*c, "structured_outputs"), *std::move(c));
  }
  const char* guided_field = "";
  KVSERVE_ASSIGN_OR_RETURN(std::optional<Constraint> guided, Guided(body, &guided_field));
  if (guided) found.emplace_back(guided_field, *std::move(guided));
  if (found.empty()) return std::nullopt;
  if (found.size() > 1) {
    return Invalid(
        found[1].first.substr(0, found[1].first.find('.')),
        absl::StrCat("a request takes one constraint; ",
                     found[0].first.substr(0, found[0].first.find('.')), " already sets one"));
  }
  KVSERVE_RETURN_IF_ERROR(CheckConstraint(found[0].second, found[0].first));
  return std::move(found[0].second);
}

}  // namespace kvserve::server::http
