// OpenAI-compatible request parsing: a JSON body -> the same
// scheduler::RequestParams the gRPC path builds (server/request_convert.h
// holds the checks both frontends share), and errors -> OpenAI's error JSON.
//
// Parsing rules (as OpenAI and vLLM accept requests):
// - unknown fields are ignored; a field whose value is null is absent;
// - a field of the wrong type or out of range is InvalidArgument whose
//   message starts with the parameter's name ("temperature: ...",
//   "messages[2].content: ..."); ToApiError turns that name into "param";
// - ranges the engine enforces for both APIs (sampling values, max_tokens
//   against the model length) are checked by the same engine code, and
//   their errors are mapped to the OpenAI parameter names.
//
// Pure functions of their inputs; thread-safe. No Beast, no sockets (the
// fuzz target and unit tests link this alone).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chat/chat_template.h"
#include "engine/loader/generation_config.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "scheduler/request.h"
#include "server/http/openai_tools.h"
#include "server/tool_calling/tool_call_parser.h"

namespace kvserve::server::http {

using Json = nlohmann::ordered_json;

inline constexpr int kMaxJsonDepth = 64;                 // deeper bodies are refused (400)
inline constexpr int kMaxChoices = 128;                  // prompts x n in one request
inline constexpr int kCompletionsDefaultMaxTokens = 16;  // OpenAI's legacy default

enum class Endpoint { kCompletions, kChat };

// What parsing needs from the served model; owned by the daemon, read-only.
struct ModelContext {
  // The ids /v1/models lists (never empty); a request naming another is 404
  // model_not_found. model_name is the first: every response's "model".
  std::vector<std::string> served_model_names;
  std::string model_name;
  std::string model_root;  // the --model value: each id's "root"
  // "gguf", "safetensors" or "builtin" (engine::Model::checkpoint_format):
  // each id's "checkpoint_format".
  std::string checkpoint_format;
  const engine::Tokenizer* tokenizer = nullptr;  // null: token-id prompts only
  int32_t vocab_size = 0;
  int32_t max_model_len = 0;
  int64_t kv_capacity_tokens = 0;  // caps chat's default max_tokens
  engine::SamplingDefaults defaults;
  const chat::ChatTemplate* chat_template = nullptr;  // null: chat requests are 400
  std::string chat_template_error;                    // why, when loading it failed
  // The format tool calls are parsed in (--tool_call_parser, or the one the
  // chat template teaches).
  tool_calling::ToolCallFormat tool_call_format = tool_calling::ToolCallFormat::kJson;
};

// A validated /v1/completions or /v1/chat/completions request.
struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  // One entry per prompt (chat: exactly one). Choice c belongs to prompt
  // c / n and is that prompt's sample c % n (OpenAI's and vLLM's order).
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo_texts;  // completions with echo: each prompt's text
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats
  bool echo = false;
  bool logprobs = false;  // completions: logprobs present; chat: logprobs == true
  int32_t top_logprobs = 0;
  // vLLM's "prompt_logprobs" (both endpoints): the top entries per prompt
  // token; -1 when not asked. Completions' echo with logprobs scores the
  // prompt too (with top_logprobs entries): base.num_prompt_logprobs covers both.
  int32_t prompt_logprobs = -1;
  bool echo_logprobs() const { return echo && logprobs; }
  bool max_tokens_given = false;  // else chat fills it from the model length
  // Everything but the prompt tokens and the seed.
  scheduler::RequestParams base;
  std::optional<uint64_t> seed;
  // Chat with tools (tool_choice not "none"): how the output's tool calls are read.
  std::optional<ToolCalling> tool_calling;

  int32_t num_choices() const { return static_cast<int32_t>(prompts.size()) * n; }
  // The engine request of choice c. With a seed, sample i of a prompt draws
  // with seed + i (vLLM's rule, so n > 1 samples differ); without one,
  // `random_seed` + i (the caller draws it per request).
  scheduler::RequestParams ParamsFor(int32_t choice, uint64_t random_seed) const;
};

// OK when `name` is one of model.served_model_names; NotFound (404
// model_not_found) naming it and the served names otherwise.
absl::Status CheckServedModel(std::string_view name, const ModelContext& model);

// Parses a request body. InvalidArgument ("body: ...") for malformed JSON,
// JSON nested deeper than kMaxJsonDepth, or a top level that is not an object.
absl::StatusOr<Json> ParseJsonBody(std::string_view body);

absl::StatusOr<GenerationRequest> ParseGenerationRequest(Endpoint endpoint, const Json& body,
                                                         const ModelContext& model);

// POST /tokenize: {"prompt": str} or {"messages": [...]} (rendered with the
// chat template), "add_special_tokens" (default: true for prompt, false for
// messages), "add_generation_prompt" (messages; default true).
absl::StatusOr<std::vector<int32_t>> ParseTokenizeRequest(const Json& body,
                                                          const ModelContext& model);
// POST /detokenize: {"tokens": [ids]}.
absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(const Json& body,
                                                            const ModelContext& model);

// ---- errors ----

struct ApiError {
  int http_status = 500;
  std::string message;
  std::string type;   // invalid_request_error, authentication_error, ...
  std::string param;  // empty: null
  std::string code;   // empty: null
};

// absl code -> HTTP status: InvalidArgument 400, Unauthenticated 401,
// NotFound 404, ResourceExhausted 429, Unavailable 503, anything else 500.
// "param" is the parameter the message starts with, in OpenAI's names
// (the engine's "prompt_tokens" is `prompt_param`, "stop_strings" is "stop").
ApiError ToApiError(const absl::Status& status, std::string_view prompt_param = "prompt");
Json ErrorJson(const ApiError& error);  // {"error": {message, type, param, code}}

// JSON text in ASCII (non-ASCII characters as \uXXXX escapes, so that no
// reader splits an SSE data line at U+0085 / U+2028 / U+2029); invalid UTF-8
// (never expected) is replaced, never thrown.
std::string Dump(const Json& json);

}  // namespace kvserve::server::http
