#include "server/http/openai_handlers.h"

#include <chrono>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/http/openai_generation.h"
#include "server/http/openai_render.h"
#include "server/http/openai_responses.h"
#include "server/http/responses_call.h"

namespace kvserve::server::http {
namespace {

constexpr char kJson[] = "application/json";

std::string_view PathOf(std::string_view target) { return target.substr(0, target.find('?')); }

constexpr std::string_view kModelPrefix = "/v1/models/";

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A path segment with its %XX escapes decoded (a model id may hold "/" or
// ":", which clients escape); a malformed escape stays as it is.
std::string PercentDecoded(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int high = text[i] == '%' && i + 2 < text.size() ? HexDigit(text[i + 1]) : -1;
    const int low = high >= 0 ? HexDigit(text[i + 2]) : -1;
    if (low >= 0) {
      out.push_back(static_cast<char>(high * 16 + low));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace

void RespondError(HttpChannel& channel, const absl::Status& status, std::string_view prompt_param) {
  const ApiError error = ToApiError(status, prompt_param);
  channel.Respond(error.http_status, kJson, Dump(ErrorJson(error)));
}

OpenAiHandler::OpenAiHandler(ServingState& state, const ModelContext& model)
    : state_(state),
      model_(model),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()) {}

namespace {

// An error of the chat request a Responses body became, renamed to the
// Responses API's fields (the messages are "<field>: why").
absl::Status ResponsesFieldNames(const absl::Status& status) {
  static constexpr std::pair<std::string_view, std::string_view> kRenamed[] = {
      {"messages", "input"},
      {"max_tokens", "max_output_tokens"},
      {"response_format.json_schema", "text.format"},
      {"response_format", "text.format"},
  };
  const std::string message(status.message());
  for (const auto& [chat, responses] : kRenamed) {
    if (message.starts_with(chat) && message.size() > chat.size() &&
        (message[chat.size()] == ':' || message[chat.size()] == '.' ||
         message[chat.size()] == '[')) {
      return absl::Status(status.code(),
                          absl::StrCat(std::string(responses), message.substr(chat.size())));
    }
  }
  return status;
}

}  // namespace

std::shared_ptr<Exchange> OpenAiHandler::Handle(HttpRequest request, HttpChannel& channel) {
  const std::string_view path = PathOf(request.target);
  struct Route {
    std::string_view path;
    std::string_view method;
  };
  static constexpr Route kRoutes[] = {
      {"/v1/completions", "POST"},
      {"/v1/chat/completions", "POST"},
      {"/v1/models", "GET"},
      {"/tokenize", "POST"},
      {"/detokenize", "POST"},
      {"/health", "GET"},
      {"/v1/completions/render", "POST"},
      {"/v1/chat/completions/render", "POST"},
      {"/v1/responses", "POST"},
      {"/reset_prefix_cache", "POST"},
  };
  static constexpr Route kModelRoute = {kModelPrefix, "GET"};
  const Route* route = nullptr;
  for (const Route& r : kRoutes) {
    if (r.path == path) route = &r;
  }
  if (route == nullptr && path.size() > kModelPrefix.size() && path.starts_with(kModelPrefix)) {
    route = &kModelRoute;
  }
  if (route == nullptr) {
    const ApiError error{.http_status = 404,
                         .message = absl::StrCat("no such endpoint: ", std::string(path)),
                         .type = "invalid_request_error",
                         .param = "",
                         .code = ""};
    channel.Respond(404, kJson, Dump(ErrorJson(error)));
    return nullptr;
  }
  if (request.method != route->method) {
    ApiError error{.http_status = 405,
                   .message = absl::StrCat(std::string(path), " takes ", std::string(route->method),
                                           ", not ", request.method),
                   .type = "invalid_request_error",
                   .param = "",
                   .code = ""};
    channel.Respond(405, kJson, Dump(ErrorJson(error)));
    return nullptr;
  }
  // Health is for probes: no token, and 503 (not 200) while draining.
  if (path == "/health") {
    if (state_.draining()) {
      RespondError(channel, absl::UnavailableError("the server is draining"));
    } else {
      channel.Respond(200, kJson, "{}");
    }
    return nullptr;
  }
  const bool generation =
      path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/responses";
  if (state_.draining()) {
    if (generation) state_.metrics().OnRejected(Rejection::kUnavailable);
    RespondError(channel, absl::UnavailableError("the server is draining"));
    return nullptr;
  }
  if (absl::Status s = state_.auth().CheckHeader(request.authorization); !s.ok()) {
    if (generation) state_.metrics().OnRejected(Rejection::kUnauthenticated);
    RespondError(channel, s);
    return nullptr;
  }
  if (path == "/reset_prefix_cache") return ResetPrefixCache(channel);
  if (path == "/v1/completions") return Generate(Endpoint::kCompletions, request, channel);
  if (path == "/v1/chat/completions") return Generate(Endpoint::kChat, request, channel);
  if (path == "/v1/responses") return Responses(request, channel);
  if (path == "/v1/completions/render") {
    Render(Endpoint::kCompletions, request, channel);
  } else if (path == "/v1/chat/completions/render") {
    Render(Endpoint::kChat, request, channel);
  } else if (path == "/v1/models") {
    Models(channel);
  } else if (route == &kModelRoute) {
    Model(path.substr(kModelPrefix.size()), channel);
  } else if (path == "/tokenize") {
    Tokenize(request, channel);
  } else {
    Detokenize(request, channel);
  }
  return nullptr;
}

namespace {

// POST /reset_prefix_cache, answered when the engine loop has tried: the
// loop's callback posts the answer to the connection's strand.
class ResetExchange final : public Exchange, public std::enable_shared_from_this<ResetExchange> {
 public:
  explicit ResetExchange(HttpChannel& channel) : channel_(channel), poster_(channel.poster()) {}

  void Start(scheduler::EngineLoop& loop) {
    loop.ResetPrefixCache([weak = weak_from_this(), poster = poster_](bool reset) {
      poster([weak, reset] {
        if (std::shared_ptr<ResetExchange> self = weak.lock()) self->Answer(reset);
      });
    });
  }
  void OnDisconnect() override {}

 private:
  void Answer(bool reset) {
    if (reset) {
      channel_.Respond(200, std::string(kJson), "{}");
      return;
    }
    const ApiError error{.http_status = 409,
                         .message =
                             "the prefix cache was not reset: requests hold KV blocks "
                             "(retry when they have finished)",
                         .type = "invalid_request_error",
                         .param = "",
                         .code = "blocks_in_use"};
    channel_.Respond(409, std::string(kJson), Dump(ErrorJson(error)));
  }

  HttpChannel& channel_;  // outlives the exchange (http_channel.h)
  const Poster poster_;
};

}  // namespace

std::shared_ptr<Exchange> OpenAiHandler::ResetPrefixCache(HttpChannel& channel) {
  auto exchange = std::make_shared<ResetExchange>(channel);
  exchange->Start(state_.loop());
  return exchange;
}

std::shared_ptr<Exchange> OpenAiHandler::Generate(Endpoint endpoint, const HttpRequest& request,
                                                  HttpChannel& channel) {
  const std::string_view prompt_param = endpoint == Endpoint::kChat ? "messages" : "prompt";
  absl::StatusOr<Json> body = ParseJsonBody(request.body);
  absl::StatusOr<GenerationRequest> parsed = body.ok()
                                                 ? ParseGenerationRequest(endpoint, *body, model_)
                                                 : absl::StatusOr<GenerationRequest>(body.status());
  if (!parsed.ok()) {
    state_.metrics().OnRejected(Rejection::kInvalidArgument);
    RespondError(channel, parsed.status(), prompt_param);
    return nullptr;
  }
  return GenerationCall::Start(state_, model_, *std::move(parsed), channel);
}

std::shared_ptr<Exchange> OpenAiHandler::Responses(const HttpRequest& request,
                                                   HttpChannel& channel) {
  absl::StatusOr<Json> body = ParseJsonBody(request.body);
  absl::StatusOr<Json> chat = body.ok() ? ResponsesToChatBody(*body) : body.status();
  absl::StatusOr<GenerationRequest> parsed =
      chat.ok() ? ParseGenerationRequest(Endpoint::kChat, *chat, model_)
                : absl::StatusOr<GenerationRequest>(chat.status());
  if (!parsed.ok()) {
    state_.metrics().OnRejected(Rejection::kInvalidArgument);
    RespondError(channel, ResponsesFieldNames(parsed.status()), "input");
    return nullptr;
  }
  return ResponsesCall::Start(state_, model_, *std::move(parsed), ResponseEcho(*body), channel);
}

void OpenAiHandler::Render(Endpoint endpoint, const HttpRequest& request,
                           HttpChannel& channel) const {
  const std::string_view prompt_param = endpoint == Endpoint::kChat ? "messages" : "prompt";
  absl::StatusOr<Json> body = ParseJsonBody(request.body);
  if (!body.ok()) return RespondError(channel, body.status(), prompt_param);
  // vLLM's render-only options kvserve does not compute: refused by name
  // rather than answered without them.
  for (const char* key : {"return_token_offsets", "return_assistant_tokens_mask"}) {
    if (const auto it = body->find(key); it != body->end() && *it == true) {
      return RespondError(channel,
                          absl::InvalidArgumentError(absl::StrCat(key, ": is not implemented")));
    }
  }
  absl::StatusOr<GenerationRequest> parsed = ParseGenerationRequest(endpoint, *body, model_);
  if (!parsed.ok()) return RespondError(channel, parsed.status(), prompt_param);
  const std::string id = RandomId(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
  channel.Respond(200, kJson, Dump(RenderResponse(*parsed, model_, id)));
}

Json OpenAiHandler::ModelCard(const std::string& id) const {
  Json model = Json::object();
  model["id"] = id;
  model["object"] = "model";
  model["created"] = created_;
  model["owned_by"] = "kvserve";
  model["root"] = model_.model_root;
  model["checkpoint_format"] = model_.checkpoint_format;
  model["parent"] = nullptr;
  model["max_model_len"] = model_.max_model_len;
  return model;
}

void OpenAiHandler::Models(HttpChannel& channel) const {
  Json data = Json::array();
  for (const std::string& name : model_.served_model_names) data.push_back(ModelCard(name));
  Json list = Json::object();
  list["object"] = "list";
  list["data"] = std::move(data);
  channel.Respond(200, kJson, Dump(list));
}

void OpenAiHandler::Model(std::string_view encoded_id, HttpChannel& channel) const {
  const std::string id = PercentDecoded(encoded_id);
  if (absl::Status s = CheckServedModel(id, model_); !s.ok()) return RespondError(channel, s);
  channel.Respond(200, kJson, Dump(ModelCard(id)));
}

void OpenAiHandler::Tokenize(const HttpRequest& request, HttpChannel& channel) const {
  absl::StatusOr<Json> body = ParseJsonBody(request.body);
  if (!body.ok()) return RespondError(channel, body.status());
  absl::StatusOr<std::vector<int32_t>> ids = ParseTokenizeRequest(*body, model_);
  if (!ids.ok()) return RespondError(channel, ids.status());
  Json out = Json::object();
  out["tokens"] = *ids;
  out["count"] = ids->size();
  out["max_model_len"] = model_.max_model_len;
  channel.Respond(200, kJson, Dump(out));
}

void OpenAiHandler::Detokenize(const HttpRequest& request, HttpChannel& channel) const {
  absl::StatusOr<Json> body = ParseJsonBody(request.body);
  if (!body.ok()) return RespondError(channel, body.status());
  absl::StatusOr<std::vector<int32_t>> ids = ParseDetokenizeRequest(*body, model_);
  if (!ids.ok()) return RespondError(channel, ids.status());
  Json out = Json::object();
  out["prompt"] = model_.tokenizer->Decode(*ids, /*skip_special=*/false);
  channel.Respond(200, kJson, Dump(out));
}

}  // namespace kvserve::server::http
