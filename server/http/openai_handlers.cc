#include "server/http/openai_handlers.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/http/openai_generation.h"

namespace kvserve::server::http {
namespace {

constexpr char kJson[] = "application/json";

std::string_view PathOf(std::string_view target) { return target.substr(0, target.find('?')); }

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

std::shared_ptr<Exchange> OpenAiHandler::Handle(HttpRequest request, HttpChannel& channel) {
  const std::string_view path = PathOf(request.target);
  struct Route {
    std::string_view path;
    std::string_view method;
  };
  static constexpr Route kRoutes[] = {
      {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"}, {"/v1/models", "GET"},
      {"/tokenize", "POST"},       {"/detokenize", "POST"},          {"/health", "GET"},
  };
  const Route* route = nullptr;
  for (const Route& r : kRoutes) {
    if (r.path == path) route = &r;
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
  const bool generation = path == "/v1/completions" || path == "/v1/chat/completions";
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
  if (path == "/v1/completions") return Generate(Endpoint::kCompletions, request, channel);
  if (path == "/v1/chat/completions") return Generate(Endpoint::kChat, request, channel);
  if (path == "/v1/models") {
    Models(channel);
  } else if (path == "/tokenize") {
    Tokenize(request, channel);
  } else {
    Detokenize(request, channel);
  }
  return nullptr;
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

void OpenAiHandler::Models(HttpChannel& channel) const {
  Json model = Json::object();
  model["id"] = model_.model_name;
  model["object"] = "model";
  model["created"] = created_;
  model["owned_by"] = "kvserve";
  model["root"] = model_.model_name;
  model["parent"] = nullptr;
  model["max_model_len"] = model_.max_model_len;
  Json list = Json::object();
  list["object"] = "list";
  list["data"] = Json::array({std::move(model)});
  channel.Respond(200, kJson, Dump(list));
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
