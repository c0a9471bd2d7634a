// The OpenAI-compatible endpoints (docs/server.md "HTTP API"):
//   POST /v1/completions, POST /v1/chat/completions  (GenerationCall)
//   POST /v1/responses                               (ResponsesCall)
//   GET  /v1/models, POST /tokenize, POST /detokenize (answered at once)
//   GET  /health                                     (200; 503 while draining)
// Every endpoint but /health refuses with 503 while draining and 401 without
// the bearer token (when --auth_token_file is set), as the gRPC API does.
// Errors are OpenAI's error JSON (openai_protocol.h: ToApiError).
//
// Thread-safety: Handle runs on the calling connection's strand; the handler
// itself is immutable after construction and shared by every connection.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "server/http/http_channel.h"
#include "server/http/openai_protocol.h"
#include "server/serving_state.h"

namespace kvserve::server::http {

class OpenAiHandler final : public RequestHandler {
 public:
  // `state` and `model` (and what it points to) outlive the handler.
  OpenAiHandler(ServingState& state, const ModelContext& model);

  std::shared_ptr<Exchange> Handle(HttpRequest request, HttpChannel& channel) override;

 private:
  std::shared_ptr<Exchange> Generate(Endpoint endpoint, const HttpRequest& request,
                                     HttpChannel& channel);
  // POST /v1/responses (openai_responses.h, responses_call.h).
  std::shared_ptr<Exchange> Responses(const HttpRequest& request, HttpChannel& channel);
  // POST /reset_prefix_cache (vLLM's): drops every cached prefix block once
  // no request holds blocks; 200 {}, or 409 while blocks are in use.
  std::shared_ptr<Exchange> ResetPrefixCache(HttpChannel& channel);
  // POST /v1/completions/render, /v1/chat/completions/render (openai_render.h).
  void Render(Endpoint endpoint, const HttpRequest& request, HttpChannel& channel) const;
  Json ModelCard(const std::string& id) const;  // one /v1/models entry
  void Models(HttpChannel& channel) const;
  // GET /v1/models/{id}: the entry of a served name, else 404 model_not_found.
  void Model(std::string_view encoded_id, HttpChannel& channel) const;
  void Tokenize(const HttpRequest& request, HttpChannel& channel) const;
  void Detokenize(const HttpRequest& request, HttpChannel& channel) const;

  ServingState& state_;
  const ModelContext& model_;
  const int64_t created_;  // server start, Unix seconds (/v1/models "created")
};

// Answers `status` with OpenAI's error JSON.
void RespondError(HttpChannel& channel, const absl::Status& status,
                  std::string_view prompt_param = "prompt");

}  // namespace kvserve::server::http
