// POST /v1/responses: OpenAI's Responses API, the stateless subset vLLM
// serves, translated onto the chat completions request (one parser, one
// template rendering, one set of checks):
//
//   instructions            a system message before the input
//   input                   a string (one user message) or items:
//                           {"role", "content"} messages (content a string or
//                           input_text / output_text parts; "developer" is
//                           "system"), function_call items (an assistant
//                           message's tool_calls; consecutive ones are one
//                           message) and function_call_output items (tool messages)
//   tools, tool_choice      function tools ({"type": "function", "name",
//                           "description", "parameters", "strict"}) and
//                           none / auto / required / {"type": "function", "name"}
//   parallel_tool_calls, temperature, top_p, stream, and vLLM's sampling
//   extensions (top_k, min_p, repetition_penalty, seed, ignore_eos)
//   text.format             text, json_object, json_schema ({"name", "schema",
//                           "strict"}): the chat request's response_format
//   max_output_tokens       max_tokens
//
// What needs state or is not served is a 400 naming the field: store: true,
// previous_response_id, conversation, background, include, reasoning,
// prompt, truncation "auto", max_tool_calls, top_logprobs, and non-function
// tools, non-text input parts or other item types. Fields the API defines as
// bookkeeping (metadata, user, safety_identifier, prompt_cache_key,
// service_tier) are accepted and echoed or dropped; unknown fields are
// ignored, as OpenAI does.
//
// Pure functions; thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "server/http/openai_protocol.h"

namespace kvserve::server::http {

// The chat completions body a Responses body stands for (its "messages",
// "tools", "response_format", ...); InvalidArgument naming the Responses
// field ("input[2].content[0].type: ...") for what cannot be translated.
absl::StatusOr<Json> ResponsesToChatBody(const Json& body);

// The request fields a response object repeats (instructions, max_output_tokens,
// temperature, top_p, tools, tool_choice, parallel_tool_calls, text,
// metadata), with OpenAI's defaults where the request left them out.
Json ResponseEcho(const Json& body);

}  // namespace kvserve::server::http
