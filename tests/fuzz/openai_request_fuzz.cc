// OpenAI HTTP request parsing: a body -> JSON (depth-limited) -> the native
// request, for /v1/completions, /v1/chat/completions (with a chat template),
// /tokenize and /detokenize, with the byte tokenizer of the builtin models.
// Properties: nothing throws; a request that parses has non-empty prompts of
// in-vocabulary ids, at most kMaxChoices choices, stop limits in range,
// sampling values the engine accepts (logit_bias ids in the vocabulary,
// ascending), min_tokens <= max_tokens, a forced tool call constrained by a
// structural tag; one that does
// not maps to a 4xx with a message, and its error JSON is valid JSON.
//
// Input: one byte (bit 0-1: endpoint, bit 2: a chat template is loaded),
// then the body.
#include <cstdint>
#include <memory>
#include <optional>

#include "engine/tokenizer/tokenizer.h"
#include "server/http/openai_protocol.h"
#include "server/request_convert.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using kvserve::server::http::ApiError;
using kvserve::server::http::Endpoint;
using kvserve::server::http::Json;

void CheckError(const absl::Status& status) {
  const ApiError e = kvserve::server::http::ToApiError(status);
  KVSERVE_FUZZ_CHECK(e.http_status == 400 || e.http_status == 404, std::string(status.message()));
  KVSERVE_FUZZ_CHECK(!e.message.empty(), "errors say why");
  const std::string text = kvserve::server::http::Dump(kvserve::server::http::ErrorJson(e));
  KVSERVE_FUZZ_CHECK(Json::accept(text), text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<kvserve::engine::Tokenizer> tokenizer =
      kvserve::engine::MakeByteTokenizer();
  static const kvserve::chat::ChatTemplate chat_template = *kvserve::chat::ChatTemplate::FromSource(
      "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
      "{% if add_generation_prompt %}<|assistant|>{% endif %}",
      nlohmann::json{{"bos_token", "<s>"}});
  kvserve::fuzz::FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  kvserve::server::http::ModelContext model;
  model.served_model_names = {"builtin:tiny"};
  model.model_name = "builtin:tiny";
  model.tokenizer = tokenizer.get();
  model.vocab_size = tokenizer->vocab_size();
  model.max_model_len = 256;
  model.kv_capacity_tokens = 4096;
  if (flags & 4) model.chat_template = &chat_template;

  absl::StatusOr<Json> body = kvserve::server::http::ParseJsonBody(in.Rest());
  if (!body.ok()) {
    CheckError(body.status());
    return 0;
  }
  switch (flags & 3) {
    case 0:
    case 1: {
      const Endpoint endpoint = (flags & 3) == 0 ? Endpoint::kCompletions : Endpoint::kChat;
      auto r = kvserve::server::http::ParseGenerationRequest(endpoint, *body, model);
      if (!r.ok()) {
        CheckError(r.status());
        return 0;
      }
      KVSERVE_FUZZ_CHECK(!r->prompts.empty(), "a prompt");
      // Tool calling: chat only; a forced call is the request's one constraint.
      if (r->tool_calling.has_value()) {
        KVSERVE_FUZZ_CHECK(endpoint == Endpoint::kChat, "tools on chat only");
        KVSERVE_FUZZ_CHECK(!r->tool_calling->forced ||
                               (r->base.constraint.has_value() &&
                                r->base.constraint->kind ==
                                    kvserve::engine::grammar::ConstraintKind::kStructuralTag),
                           "a forced call is a structural tag");
      }
      KVSERVE_FUZZ_CHECK(
          r->num_choices() >= 1 && r->num_choices() <= kvserve::server::http::kMaxChoices,
          std::to_string(r->num_choices()));
      for (int32_t c = 0; c < r->num_choices(); ++c) {
        const kvserve::scheduler::RequestParams p = r->ParamsFor(c, 12345);
        KVSERVE_FUZZ_CHECK(!p.prompt_tokens.empty(), "non-empty prompt");
        for (int32_t id : p.prompt_tokens) {
          KVSERVE_FUZZ_CHECK(id >= 0 && id < model.vocab_size, std::to_string(id));
        }
        KVSERVE_FUZZ_CHECK(p.sampling.Validate().ok(), "sampling the engine accepts");
        // max_tokens 0: completions' prompt alone (echoed or scored).
        KVSERVE_FUZZ_CHECK(p.stop.max_tokens >= (endpoint == Endpoint::kChat ? 1 : 0) &&
                               p.stop.min_tokens >= 0 && p.stop.min_tokens <= p.stop.max_tokens,
                           "token limits");
        KVSERVE_FUZZ_CHECK(p.stop.stop_strings.size() <= kvserve::server::kMaxStopStrings,
                           "stop string count");
        for (const std::string& stop : p.stop.stop_strings) {
          KVSERVE_FUZZ_CHECK(!stop.empty() && stop.size() <= kvserve::server::kMaxStopStringBytes,
                             stop);
        }
        KVSERVE_FUZZ_CHECK(p.return_logprobs == r->logprobs, "logprobs");
        KVSERVE_FUZZ_CHECK(
            p.num_prompt_logprobs >= -1 && p.num_prompt_logprobs <= kvserve::engine::kMaxLogprobs,
            "prompt logprobs");
        for (const kvserve::engine::TokenBias& b : p.sampling.logit_bias) {
          KVSERVE_FUZZ_CHECK(b.token >= 0 && b.token < model.vocab_size, std::to_string(b.token));
        }
      }
      break;
    }
    case 2: {
      auto ids = kvserve::server::http::ParseTokenizeRequest(*body, model);
      if (!ids.ok()) CheckError(ids.status());
      break;
    }
    default: {
      auto ids = kvserve::server::http::ParseDetokenizeRequest(*body, model);
      if (!ids.ok()) {
        CheckError(ids.status());
        return 0;
      }
      for (int32_t id : *ids) KVSERVE_FUZZ_CHECK(id >= 0 && id < model.vocab_size, "id");
      tokenizer->Decode(*ids, false);
    }
  }
  return 0;
}
