// The structured-output fields of an OpenAI / vLLM request body, parsed into
// the engine's Constraint (engine/grammar/constraint.h) and checked by the
// same CheckConstraint as the gRPC API (server/request_convert.h):
//
//   response_format  {"type": "text"} (none), {"type": "json_object"},
//                    {"type": "json_schema", "json_schema": {"name", "schema",
//                    "strict"}}  (OpenAI; both endpoints, as vLLM takes it)
//   structured_outputs  {"json": <schema object or JSON text>} | {"regex": s} |
//                    {"choice": [s, ...]} | {"grammar": EBNF} | {"json_object": true}
//                    (vLLM), with disable_fallback, disable_additional_properties
//                    (true: strict, the default) and disable_any_whitespace
//                    (true only: kvserve's JSON has no free whitespace)
//   guided_json, guided_regex, guided_choice, guided_grammar  (vLLM's older
//                    names), guided_decoding_backend "xgrammar" or "auto"
//
// At most one of these may constrain a request. What kvserve does not
// implement (structural_tag, whitespace_pattern, another backend) is an error
// naming the field, never ignored.
#pragma once

#include <optional>

#include "absl/status/statusor.h"
#include "engine/grammar/constraint.h"
#include "server/http/openai_protocol.h"

namespace kvserve::server::http {

// The body's constraint, none if it asks for none; InvalidArgument naming
// the field ("response_format.json_schema.schema: ...") otherwise.
absl::StatusOr<std::optional<engine::grammar::Constraint>> ParseConstraint(const Json& body);

}  // namespace kvserve::server::http
