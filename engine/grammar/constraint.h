// Constraint: what a structured-output request's text must match, as the
// HTTP and gRPC frontends give it (server/request_convert.h builds it), and
// its xgrammar grammar.
//
//   kJsonObject  any JSON object (OpenAI response_format json_object)
//   kJsonSchema  JSON valid under `text`, a JSON Schema (json_schema; vLLM json)
//   kRegex       text matching `text`, a regular expression (vLLM regex)
//   kChoice      exactly one of `choices` (vLLM choice)
//   kGrammar     text of the EBNF grammar `text`, root rule "root" (vLLM grammar)
//   kStructuralTag  text matching the xgrammar structural tag `text` (its JSON:
//                {"type": "structural_tag", "format": {...}}); the server builds
//                one for tool calls that must happen (tool_choice "required" or
//                a named function: server/http/openai_tools.h)
//
// JSON is generated compact (no whitespace outside strings beyond the ", "
// and ": " separators): a model free to add whitespace anywhere can loop on
// it until max_tokens. `strict` (json_schema's, default true, vLLM's default)
// forbids properties and array items the schema does not name; false allows
// what JSON Schema allows by default.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace xgrammar {
class Grammar;
}

namespace kvserve::engine::grammar {

enum class ConstraintKind { kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar, kStructuralTag };

struct Constraint {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string text;                  // kJsonSchema, kRegex, kGrammar, kStructuralTag
  std::vector<std::string> choices;  // kChoice: non-empty, each non-empty
  bool strict = true;                // kJsonSchema

  // Equal keys <=> the same grammar (the compile cache's key).
  std::string CacheKey() const;
};

// "json_object", "json_schema", "regex", "choice", "grammar", "structural_tag".
const char* ConstraintKindName(ConstraintKind kind);

// The constraint's grammar, independent of any vocabulary (cheap next to
// compiling it). InvalidArgument naming what xgrammar refused (an
// unsupported JSON Schema keyword, a regex or EBNF syntax error, an empty
// choice list) — never a silently looser grammar.
absl::StatusOr<xgrammar::Grammar> BuildGrammar(const Constraint& constraint);

// The EBNF text of compact JSON valid under `schema` (the grammar kJsonSchema
// builds, printed), for a structural tag's {"type": "grammar"} content: a
// structural tag's own "json_schema" content allows free whitespace.
// InvalidArgument naming what xgrammar refused.
absl::StatusOr<std::string> JsonSchemaEbnf(const std::string& schema, bool strict);

// The EBNF grammar of kChoice: `root ::= "a" | "b" ...`, each choice a string
// literal with `"`, `\` and control bytes escaped. Exposed for tests.
std::string ChoiceGrammar(const std::vector<std::string>& choices);

}  // namespace kvserve::engine::grammar
