// POST /v1/completions/render and /v1/chat/completions/render: a request
// body parsed exactly as the generation endpoints parse it, answered with the
// prompt's token ids instead of a generation (vLLM's render endpoints, which
// llm-d's router calls to tokenize for prefix-aware routing). The shape is
// vLLM's token-in request (GenerateRequest): "request_id", "token_ids",
// "sampling_params", "model", "stream", "stream_options"; completions answer
// a list with one per prompt, chat one object (with "features": null).
//
// Pure functions; thread-safe.
#pragma once

#include <string_view>

#include "server/http/openai_protocol.h"

namespace kvserve::server::http {

// The render response for a parsed request; request_id_base is "cmpl-..." /
// "chatcmpl-..." (completions' entries append "-<prompt index>").
Json RenderResponse(const GenerationRequest& request, const ModelContext& model,
                    std::string_view request_id_base);

// The sampling parameters the engine will use, in vLLM's SamplingParams names.
Json SamplingParamsJson(const GenerationRequest& request);

}  // namespace kvserve::server::http
