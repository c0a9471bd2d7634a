#include "engine/grammar/constraint.h"

#include <exception>
#include <stdexcept>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "xgrammar/exception.h"
#include "xgrammar/grammar.h"

namespace kvserve::engine::grammar {

const char* ConstraintKindName(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::kJsonObject:
      return "json_object";
    case ConstraintKind::kJsonSchema:
      return "json_schema";
    case ConstraintKind::kRegex:
      return "regex";
    case ConstraintKind::kChoice:
      return "choice";
    case ConstraintKind::kGrammar:
      return "grammar";
    case ConstraintKind::kStructuralTag:
      return "structural_tag";
  }
  return "unknown";
}

std::string Constraint::CacheKey() const {
  // Length-prefixed fields: no two constraints share a key.
  std::string key =
      absl::StrCat(ConstraintKindName(kind), ":", strict ? 1 : 0, ":", text.size(), ":", text);
  for (const std::string& c : choices) absl::StrAppend(&key, ":", c.size(), ":", c);
  return key;
}

std::string ChoiceGrammar(const std::vector<std::string>& choices) {
  std::string ebnf = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) ebnf += " | ";
    ebnf += '"';
    for (const char ch : choices[i]) {
      const auto byte = static_cast<unsigned char>(ch);
      if (ch == '"' || ch == '\\') {
        ebnf += '\\';
        ebnf += ch;
      } else if (byte < 0x20 || byte == 0x7f) {
        ebnf += absl::StrFormat("\\x%02x", byte);
      } else {
        ebnf += ch;  // UTF-8 bytes stand for themselves in an EBNF string
      }
    }
    ebnf += '"';
  }
  ebnf += "\n";
  return ebnf;
}

namespace {

// The schema of kJsonObject: any object.
constexpr char kAnyObjectSchema[] = R"({"type": "object"})";

xgrammar::Grammar BuildOrThrow(const Constraint& c) {
  switch (c.kind) {
    case ConstraintKind::kJsonObject:
      return xgrammar::Grammar::FromJSONSchema(kAnyObjectSchema, /*any_whitespace=*/false,
                                               /*indent=*/std::nullopt,
                                               /*separators=*/std::nullopt, /*strict_mode=*/false);
    case ConstraintKind::kJsonSchema:
      return xgrammar::Grammar::FromJSONSchema(c.text, /*any_whitespace=*/false,
                                               /*indent=*/std::nullopt,
                                               /*separators=*/std::nullopt, c.strict);
    case ConstraintKind::kRegex:
      return xgrammar::Grammar::FromRegex(c.text);
    case ConstraintKind::kChoice:
      return xgrammar::Grammar::FromEBNF(ChoiceGrammar(c.choices));
    case ConstraintKind::kGrammar:
      return xgrammar::Grammar::FromEBNF(c.text);
    case ConstraintKind::kStructuralTag: {
      std::variant<xgrammar::Grammar, xgrammar::StructuralTagError> built =
          xgrammar::Grammar::FromStructuralTag(c.text);
      if (auto* grammar = std::get_if<xgrammar::Grammar>(&built)) return *grammar;
      throw std::invalid_argument(std::visit([](const auto& e) { return std::string(e.what()); },
                                             std::get<xgrammar::StructuralTagError>(built)));
    }
  }
  return xgrammar::Grammar::BuiltinJSONGrammar();  // unreachable: every kind returns above
}

}  // namespace

absl::StatusOr<std::string> JsonSchemaEbnf(const std::string& schema, bool strict) {
  try {
    return xgrammar::Grammar::FromJSONSchema(schema, /*any_whitespace=*/false,
                                             /*indent=*/std::nullopt,
                                             /*separators=*/std::nullopt, strict)
        .ToString();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("json_schema: xgrammar cannot use it: ", e.what()));
  }
}

absl::StatusOr<xgrammar::Grammar> BuildGrammar(const Constraint& constraint) {
  if (constraint.kind == ConstraintKind::kChoice) {
    if (constraint.choices.empty()) return absl::InvalidArgumentError("choice: the list is empty");
    for (const std::string& c : constraint.choices) {
      if (c.empty()) return absl::InvalidArgumentError("choice: a choice is the empty string");
    }
  }
  if (constraint.kind != ConstraintKind::kChoice &&
      constraint.kind != ConstraintKind::kJsonObject && constraint.text.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        ConstraintKindName(constraint.kind), ": the ",
        constraint.kind == ConstraintKind::kJsonSchema ? "schema" : "expression", " is empty"));
  }
  // xgrammar reports what it refuses by throwing; nothing is thrown past here.
  try {
    return BuildOrThrow(constraint);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(ConstraintKindName(constraint.kind), ": xgrammar cannot use it: ", e.what()));
  }
}

}  // namespace kvserve::engine::grammar
