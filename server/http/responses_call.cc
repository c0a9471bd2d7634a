#include "server/http/responses_call.h"

#include <chrono>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/http/openai_format.h"
#include "server/http/openai_generation.h"

namespace kvserve::server::http {
namespace {

uint64_t RandomSeed() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The Responses API's usage object.
Json ResponsesUsage(const scheduler::Usage& usage) {
  Json out = Json::object();
  out["input_tokens"] = usage.prompt_tokens;
  out["input_tokens_details"] = Json{{"cached_tokens", usage.cached_prompt_tokens}};
  out["output_tokens"] = usage.completion_tokens;
  out["output_tokens_details"] = Json{{"reasoning_tokens", 0}};
  out["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  return out;
}

}  // namespace

ResponsesCall::ResponsesCall(ServingState& state, const ModelContext& model,
                             GenerationRequest request, Json echo, HttpChannel& channel)
    : state_(state),
      model_(model),
      request_(std::move(request)),
      echo_(std::move(echo)),
      channel_(channel),
      id_(RandomId("resp_")),
      created_at_(NowSeconds()),
      items_(request_.tool_calling) {
  state_.StreamStarted();
}

ResponsesCall::~ResponsesCall() {
  if (submitted_ && !finished_) state_.loop().Abort(engine_id_);
  state_.StreamDone();
}

std::shared_ptr<ResponsesCall> ResponsesCall::Start(ServingState& state, const ModelContext& model,
                                                    GenerationRequest request, Json echo,
                                                    HttpChannel& channel) {
  auto call =
      std::make_shared<ResponsesCall>(state, model, std::move(request), std::move(echo), channel);
  const Poster poster = channel.poster();
  const std::weak_ptr<ResponsesCall> weak = call;
  // Engine loop thread: metrics and the log line, then to the strand.
  scheduler::OutputCallback callback = [&state, poster, weak,
                                        log_id = call->id_](scheduler::RequestOutput&& out) {
    state.metrics().OnOutput(out);
    if (out.finished && state.log_requests()) LogFinished(log_id, out);
    poster([weak, out = std::move(out)]() mutable {
      if (std::shared_ptr<ResponsesCall> self = weak.lock()) self->OnOutput(std::move(out));
    });
  };
  absl::StatusOr<scheduler::RequestId> id =
      state.loop().Submit(call->request_.ParamsFor(0, RandomSeed()), std::move(callback));
  if (!id.ok()) {
    state.metrics().OnRejected(id.status().code() == absl::StatusCode::kResourceExhausted
                                   ? Rejection::kQueueFull
                                   : Rejection::kInvalidArgument);
    call->done_ = true;
    const ApiError error = ToApiError(id.status(), "input");
    channel.Respond(error.http_status, "application/json", Dump(ErrorJson(error)));
    return nullptr;
  }
  state.metrics().OnAccepted(ServerMetrics::Api::kHttp);
  if (call->request_.tool_calling.has_value()) state.metrics().OnToolCallRequest();
  call->engine_id_ = *id;
  call->submitted_ = true;
  if (call->request_.stream) {
    channel.BeginEventStream();
    call->Send(
        Json{{"type", "response.created"}, {"response", call->ResponseObject("in_progress")}});
    call->Send(
        Json{{"type", "response.in_progress"}, {"response", call->ResponseObject("in_progress")}});
  }
  return call;
}

void ResponsesCall::OnDisconnect() {
  done_ = true;
  if (submitted_ && !finished_) {
    finished_ = true;
    state_.loop().Abort(engine_id_);
  }
}

void ResponsesCall::OnOutput(scheduler::RequestOutput&& out) {
  if (done_ || channel_.closed() || finished_) return;
  const ResponseItems::Delta delta = items_.Feed(out.text);
  if (request_.stream) StreamDelta(delta);
  if (out.finished) Finish(out);
}

void ResponsesCall::Finish(const scheduler::RequestOutput& out) {
  finished_ = true;
  const std::optional<std::string> reason = FinishReasonString(out.finish_reason);
  if (!reason.has_value()) {
    return Fail(out.status.ok() ? absl::UnavailableError("the request did not finish")
                                : out.status);
  }
  finish_reason_ = *reason;
  usage_ = out.usage;
  const bool incomplete = finish_reason_ == "length";
  const ResponseItems::Delta closing = items_.Finish(incomplete ? "incomplete" : "completed");
  if (items_.malformed()) state_.metrics().OnToolCallParseFailure();
  done_ = true;
  const Json response = ResponseObject(incomplete ? "incomplete" : "completed");
  if (!request_.stream) {
    channel_.Respond(200, "application/json", Dump(response));
    return;
  }
  StreamDelta(closing);
  Send(Json{{"type", incomplete ? "response.incomplete" : "response.completed"},
            {"response", response}});
  channel_.EndEventStream();
}

void ResponsesCall::Fail(const absl::Status& status) {
  done_ = true;
  const ApiError error = ToApiError(status, "input");
  if (!request_.stream) {
    channel_.Respond(error.http_status, "application/json", Dump(ErrorJson(error)));
    return;
  }
  // The status line (200) is gone: the Responses API's error event.
  Send(Json{{"type", "error"},
            {"code", error.code.empty() ? Json(error.type) : Json(error.code)},
            {"message", error.message},
            {"param", error.param.empty() ? Json() : Json(error.param)}});
  channel_.EndEventStream();
}

void ResponsesCall::StreamDelta(const ResponseItems::Delta& delta) {
  for (const Json& event : delta.events) Send(event);
}

void ResponsesCall::Send(Json event) {
  event["sequence_number"] = sequence_number_++;
  const std::string type = event["type"].get<std::string>();
  channel_.SendNamedEvent(type, Dump(event));
}

Json ResponsesCall::ResponseObject(std::string_view status) const {
  Json response = echo_;
  response["id"] = id_;
  response["object"] = "response";
  response["created_at"] = created_at_;
  response["status"] = std::string(status);
  response["model"] = model_.model_name;
  response["output"] = status == "in_progress" ? Json::array() : items_.output();
  response["error"] = nullptr;
  response["incomplete_details"] =
      status == "incomplete" ? Json{{"reason", "max_output_tokens"}} : Json();
  response["usage"] = status == "in_progress" ? Json() : ResponsesUsage(usage_);
  return response;
}

}  // namespace kvserve::server::http
