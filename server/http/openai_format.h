// Engine outputs -> OpenAI JSON: response bodies, SSE chunks, logprobs and
// usage objects, in the shapes the openai clients and vLLM use.
//
// Pure functions; thread-safe. Token strings for logprobs are each token's
// own bytes (Tokenizer::AppendTokenBytes), invalid UTF-8 replaced by U+FFFD;
// chat's "bytes" are the raw bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/tokenizer/tokenizer.h"
#include "scheduler/output_stream.h"
#include "server/http/openai_protocol.h"

namespace kvserve::server::http {

// "stop" or "length"; nullopt for the finishes that are errors (aborted,
// expired, rejected, error) or not finished.
std::optional<std::string> FinishReasonString(scheduler::FinishReason reason);

// {"prompt_tokens", "completion_tokens", "total_tokens",
//  "prompt_tokens_details": {"cached_tokens"}}.
Json UsageJson(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);

// Completions' logprobs object for these tokens: {"tokens", "token_logprobs",
// "top_logprobs" (one {token: logprob} object per token), "text_offset"}.
// *text_offset: the choice's text length (in code points, as Python's len)
// before these tokens; advanced past them.
Json CompletionLogprobs(std::span<const scheduler::TokenLogprobs> logprobs,
                        const engine::Tokenizer* tokenizer, int64_t* text_offset);
// Appends one completions logprobs object to another (non-streaming merge).
void AppendCompletionLogprobs(const Json& more, Json* into);

// Completions with echo and logprobs: the prompt's part of the logprobs
// object, one entry per prompt token, the first with null logprob and null
// top_logprobs (it has no context), the others from `scored` (prompt tokens
// 1..n-1) with their first num_top top entries. Offsets start at 0.
Json EchoedPromptLogprobs(std::span<const int32_t> prompt,
                          std::span<const scheduler::TokenLogprobs> scored, int32_t num_top,
                          const engine::Tokenizer* tokenizer, int64_t* text_offset);

// vLLM's "prompt_logprobs": [null, {"<id>": {"logprob", "rank",
// "decoded_token"}, ...}, ...], one entry per prompt token: the token
// itself and the first num_top top entries (ranks 1..num_top).
Json VllmPromptLogprobs(std::span<const scheduler::TokenLogprobs> scored, int32_t num_top,
                        const engine::Tokenizer* tokenizer);

// Chat's logprobs "content" entries: [{"token", "logprob", "bytes",
// "top_logprobs": [{"token", "logprob", "bytes"}]}].
Json ChatLogprobContent(std::span<const scheduler::TokenLogprobs> logprobs,
                        const engine::Tokenizer* tokenizer);

// The envelope every response and chunk carries.
struct ResponseMeta {
  std::string id;  // cmpl-... / chatcmpl-...
  int64_t created = 0;
  std::string model;
};
// {"id", "object", "created", "model"} (object: "text_completion",
// "chat.completion", "chat.completion.chunk").
Json Envelope(const ResponseMeta& meta, std::string_view object);

// Python's len(): code points of valid UTF-8.
int64_t CodePoints(std::string_view utf8);

}  // namespace kvserve::server::http
