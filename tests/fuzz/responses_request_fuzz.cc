// POST /v1/responses parsing: a body -> JSON (depth-limited) -> the chat body
// it stands for (ResponsesToChatBody) -> the native chat request, with the
// byte tokenizer of the builtin models and a ChatML-like template; and the
// response echo of the body.
// Properties: nothing throws; a body that translates gives a chat body whose
// messages are objects with a role; a request that parses has a non-empty
// in-vocabulary prompt and sampling the engine accepts; one that does not
// maps to a 4xx with a message, and its error JSON is valid JSON; the echo
// is an object.
//
// Input: the body.
#include <cstdint>
#include <memory>

#include "engine/tokenizer/tokenizer.h"
#include "server/http/openai_protocol.h"
#include "server/http/openai_responses.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using kvserve::server::http::ApiError;
using kvserve::server::http::Endpoint;
using kvserve::server::http::Json;

void CheckError(const absl::Status& status) {
  const ApiError e = kvserve::server::http::ToApiError(status, "input");
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
      "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
      "{% if add_generation_prompt %}<|assistant|>{% endif %}",
      nlohmann::json::object());
  kvserve::fuzz::FuzzInput in(data, size);
  kvserve::server::http::ModelContext model;
  model.served_model_names = {"builtin:tiny"};
  model.model_name = "builtin:tiny";
  model.tokenizer = tokenizer.get();
  model.vocab_size = tokenizer->vocab_size();
  model.max_model_len = 256;
  model.kv_capacity_tokens = 4096;
  model.chat_template = &chat_template;

  absl::StatusOr<Json> body = kvserve::server::http::ParseJsonBody(in.Rest());
  if (!body.ok()) {
    CheckError(body.status());
    return 0;
  }
  const Json echo = kvserve::server::http::ResponseEcho(*body);
  KVSERVE_FUZZ_CHECK(echo.is_object(), "the echo is an object");
  absl::StatusOr<Json> chat = kvserve::server::http::ResponsesToChatBody(*body);
  if (!chat.ok()) {
    CheckError(chat.status());
    return 0;
  }
  KVSERVE_FUZZ_CHECK(chat->is_object() && (*chat)["messages"].is_array(), chat->dump());
  for (const Json& m : (*chat)["messages"]) {
    KVSERVE_FUZZ_CHECK(m.is_object() && m["role"].is_string(), m.dump());
  }
  auto r = kvserve::server::http::ParseGenerationRequest(Endpoint::kChat, *chat, model);
  if (!r.ok()) {
    CheckError(r.status());
    return 0;
  }
  const kvserve::scheduler::RequestParams p = r->ParamsFor(0, 12345);
  KVSERVE_FUZZ_CHECK(!p.prompt_tokens.empty(), "non-empty prompt");
  for (int32_t id : p.prompt_tokens) {
    KVSERVE_FUZZ_CHECK(id >= 0 && id < model.vocab_size, std::to_string(id));
  }
  KVSERVE_FUZZ_CHECK(p.sampling.Validate().ok(), "sampling the engine accepts");
  KVSERVE_FUZZ_CHECK(p.stop.max_tokens >= 1, "max_output_tokens");
  return 0;
}
