#include "server/http/openai_generation.h"

#include <chrono>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvserve::server::http {
namespace {

uint64_t RandomU64() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

Rejection RejectionOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      return Rejection::kQueueFull;
    case absl::StatusCode::kUnavailable:
      return Rejection::kUnavailable;
    default:
      return Rejection::kInvalidArgument;
  }
}

// The error a choice that finished without stop/length ends the call with.
absl::Status FinishError(const scheduler::RequestOutput& out) {
  using scheduler::FinishReason;
  switch (out.finish_reason) {
    case FinishReason::kAborted:
      return absl::UnavailableError("the request was aborted: the server is shutting down");
    case FinishReason::kExpired:
      return absl::DeadlineExceededError("the deadline passed before the request finished");
    case FinishReason::kRejected:
      return out.status.ok() ? absl::InternalError("the request was rejected") : out.status;
    default:
      return absl::InternalError(out.status.ok() ? std::string("the model step failed")
                                                 : std::string(out.status.message()));
  }
}

}  // namespace

std::string RandomId(std::string_view prefix) {
  return absl::StrCat(std::string(prefix), absl::StrFormat("%016x%016x", RandomU64(), RandomU64()));
}

GenerationCall::GenerationCall(ServingState& state, const ModelContext& model,
                               GenerationRequest request, HttpChannel& channel)
    : state_(state),
      model_(model),
      request_(std::move(request)),
      channel_(channel),
      chat_(request_.endpoint == Endpoint::kChat),
      choices_(static_cast<size_t>(request_.num_choices())) {
  state_.StreamStarted();
  meta_.id = RandomId(chat_ ? "chatcmpl-" : "cmpl-");
  meta_.created = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  meta_.model = model_.model_name;
}

GenerationCall::~GenerationCall() {
  AbortUnfinished();  // the connection went away without OnDisconnect (server stop)
  state_.StreamDone();
}

std::shared_ptr<GenerationCall> GenerationCall::Start(ServingState& state,
                                                      const ModelContext& model,
                                                      GenerationRequest request,
                                                      HttpChannel& channel) {
  auto call = std::make_shared<GenerationCall>(state, model, std::move(request), channel);
  const uint64_t random_seed = RandomU64();
  const Poster poster = channel.poster();
  const std::weak_ptr<GenerationCall> weak = call;
  const std::string prompt_param = call->chat_ ? "messages" : "prompt";
  for (int32_t c = 0; c < call->request_.num_choices(); ++c) {
    // Engine loop thread: metrics and the log line, then hand the output to
    // the connection's strand.
    scheduler::OutputCallback callback = [&state, poster, weak, c,
                                          log_id = call->meta_.id](scheduler::RequestOutput&& out) {
      state.metrics().OnOutput(out);
      if (out.finished && state.log_requests()) LogFinished(absl::StrCat(log_id, "-", c), out);
      poster([weak, c, out = std::move(out)]() mutable {
        if (std::shared_ptr<GenerationCall> self = weak.lock()) self->OnOutput(c, std::move(out));
      });
    };
    absl::StatusOr<scheduler::RequestId> id =
        state.loop().Submit(call->request_.ParamsFor(c, random_seed), std::move(callback));
    if (!id.ok()) {
      state.metrics().OnRejected(RejectionOf(id.status()));
      const ApiError error = ToApiError(id.status(), prompt_param);
      call->AbortUnfinished();
      call->done_ = true;
      channel.Respond(error.http_status, "application/json", Dump(ErrorJson(error)));
      return nullptr;
    }
    state.metrics().OnAccepted(ServerMetrics::Api::kHttp);
    call->choices_[static_cast<size_t>(c)].engine_id = *id;
    call->choices_[static_cast<size_t>(c)].submitted = true;
  }
  if (call->request_.tool_calling.has_value()) {
    state.metrics().OnToolCallRequest();
    if (call->request_.stream) {
      for (Choice& choice : call->choices_) {
        choice.tool_parser.emplace(call->request_.tool_calling->format);
      }
    }
  }
  if (call->request_.stream) {
    channel.BeginEventStream();
    for (int32_t c = 0; c < call->request_.num_choices(); ++c) {
      Json choice = Json::object();
      choice["index"] = c;
      if (call->chat_) {
        choice["delta"] = Json{{"role", "assistant"}, {"content", ""}};
      } else if (call->request_.echo && !call->request_.echo_logprobs()) {
        choice["text"] = call->request_.echo_texts[static_cast<size_t>(c / call->request_.n)];
      } else {
        continue;  // completions send nothing before the first token (or the prompt's logprobs)
      }
      choice["logprobs"] = nullptr;
      choice["finish_reason"] = nullptr;
      call->SendChunk(Json::array({std::move(choice)}), std::nullopt);
    }
  }
  return call;
}

void GenerationCall::OnDisconnect() {
  done_ = true;
  AbortUnfinished();
}

void GenerationCall::AbortUnfinished() {
  for (Choice& choice : choices_) {
    if (choice.submitted && !choice.finished) {
      choice.finished = true;  // its final output, if any, is dropped
      state_.loop().Abort(choice.engine_id);
    }
  }
}

void GenerationCall::OnOutput(int32_t c, scheduler::RequestOutput&& out) {
  if (done_ || channel_.closed()) return;
  Choice& choice = choices_[static_cast<size_t>(c)];
  if (choice.finished) return;
  choice.completion_tokens += static_cast<int32_t>(out.token_ids.size());
  if (!choice.got_output && out.status.ok()) OnPromptScored(c, out);
  if (out.finished) {
    std::optional<std::string> reason = FinishReasonString(out.finish_reason);
    if (!reason.has_value()) return Fail(FinishError(out));
    choice.finished = true;
    choice.finish_reason = *reason;
    choice.usage = out.usage;
    ++num_finished_;
  }
  if (request_.stream) {
    StreamChunk(c, out);
  } else {
    choice.text += out.text;
    if (request_.logprobs && !out.logprobs.empty()) {
      if (chat_) {
        if (choice.logprobs.is_null()) choice.logprobs = Json::array();
        for (Json& e : ChatLogprobContent(out.logprobs, model_.tokenizer)) {
          choice.logprobs.push_back(std::move(e));
        }
      } else {
        AppendCompletionLogprobs(
            CompletionLogprobs(out.logprobs, model_.tokenizer, &choice.text_offset),
            &choice.logprobs);
      }
    }
  }
  if (num_finished_ == request_.num_choices()) Complete();
}

void GenerationCall::OnPromptScored(int32_t c, const scheduler::RequestOutput& out) {
  Choice& choice = choices_[static_cast<size_t>(c)];
  choice.got_output = true;
  const std::vector<int32_t>& prompt = request_.prompts[static_cast<size_t>(c / request_.n)];
  Json echoed;
  if (request_.echo_logprobs()) {
    echoed = EchoedPromptLogprobs(prompt, out.prompt_logprobs, request_.top_logprobs,
                                  model_.tokenizer, &choice.text_offset);
  }
  Json scored;
  if (request_.prompt_logprobs >= 0) {
    scored = VllmPromptLogprobs(out.prompt_logprobs, request_.prompt_logprobs, model_.tokenizer);
  }
  if (!request_.stream) {
    choice.logprobs = std::move(echoed);  // the completion's tokens are appended to it
    choice.prompt_logprobs = std::move(scored);
    return;
  }
  if (echoed.is_null() && scored.is_null()) return;
  // One chunk before the first token's: the echoed prompt with its logprobs,
  // and vLLM's prompt_logprobs.
  Json entry = Json::object();
  entry["index"] = c;
  if (chat_) {
    entry["delta"] = Json::object();
  } else {
    entry["text"] =
        request_.echo_logprobs() ? request_.echo_texts[static_cast<size_t>(c / request_.n)] : "";
  }
  entry["logprobs"] = echoed;
  if (!scored.is_null()) entry["prompt_logprobs"] = std::move(scored);
  entry["finish_reason"] = nullptr;
  SendChunk(Json::array({std::move(entry)}), std::nullopt);
}

std::vector<Json> GenerationCall::ToolCallDeltas(int32_t c, const scheduler::RequestOutput& out) {
  Choice& choice = choices_[static_cast<size_t>(c)];
  tool_calling::ToolCallDelta delta = choice.tool_parser->Feed(out.text);
  if (out.finished) {
    tool_calling::ToolCallDelta last = choice.tool_parser->Finish();
    delta.content += last.content;
    for (tool_calling::ToolCall& call : last.calls) delta.calls.push_back(std::move(call));
    if (choice.tool_parser->malformed()) state_.metrics().OnToolCallParseFailure();
  }
  std::vector<Json> deltas;
  if (!delta.content.empty()) deltas.push_back(Json{{"content", delta.content}});
  const int32_t max_calls = request_.tool_calling->max_calls;
  for (tool_calling::ToolCall& call : delta.calls) {
    if (max_calls > 0 && choice.tool_calls_sent >= max_calls) break;  // parallel_tool_calls false
    const int32_t index = choice.tool_calls_sent++;
    // OpenAI's shape: the first chunk of a call opens it (id, type, name,
    // arguments ""), the next ones carry its arguments.
    Json opening = Json{{"index", index},
                        {"id", RandomToolCallId()},
                        {"type", "function"},
                        {"function", Json{{"name", call.name}, {"arguments", ""}}}};
    deltas.push_back(Json{{"tool_calls", Json::array({std::move(opening)})}});
    Json arguments =
        Json{{"index", index}, {"function", Json{{"arguments", std::move(call.arguments)}}}};
    deltas.push_back(Json{{"tool_calls", Json::array({std::move(arguments)})}});
  }
  if (out.finished && choice.tool_calls_sent > 0 && choice.finish_reason == "stop") {
    choice.finish_reason = "tool_calls";
  }
  return deltas;
}

void GenerationCall::StreamChunk(int32_t c, const scheduler::RequestOutput& out) {
  const Choice& choice = choices_[static_cast<size_t>(c)];
  const bool has_logprobs = request_.logprobs && !out.logprobs.empty();
  if (out.text.empty() && !has_logprobs && !out.finished) return;
  std::vector<Json> deltas;
  if (chat_ && choice.tool_parser.has_value()) {
    deltas = ToolCallDeltas(c, out);
  } else if (chat_) {
    if (!out.text.empty()) deltas.push_back(Json{{"content", out.text}});
  }
  if (chat_ && deltas.empty() && !has_logprobs && !out.finished) return;  // all held back
  if (deltas.empty()) deltas.push_back(Json::object());
  for (size_t d = 0; d < deltas.size(); ++d) {
    const bool first = d == 0;
    const bool last = d + 1 == deltas.size();
    Json entry = Json::object();
    entry["index"] = c;
    if (chat_) {
      entry["delta"] = std::move(deltas[d]);
      entry["logprobs"] =
          first && has_logprobs
              ? Json{{"content", ChatLogprobContent(out.logprobs, model_.tokenizer)}}
              : Json();
    } else {
      entry["text"] = out.text;
      entry["logprobs"] = has_logprobs
                              ? CompletionLogprobs(out.logprobs, model_.tokenizer,
                                                   &choices_[static_cast<size_t>(c)].text_offset)
                              : Json();
    }
    entry["finish_reason"] = last && out.finished ? Json(choice.finish_reason) : Json();
    std::optional<Json> usage;
    if (last && request_.continuous_usage) usage = ChoiceUsage(c);
    SendChunk(Json::array({std::move(entry)}), std::move(usage));
  }
}

void GenerationCall::SendChunk(Json choices, std::optional<Json> usage) {
  Json chunk = Envelope(meta_, chat_ ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = std::move(choices);
  if (usage.has_value()) {
    chunk["usage"] = *std::move(usage);
  } else if (request_.include_usage) {
    chunk["usage"] = nullptr;  // OpenAI: null on every chunk but the usage chunk
  }
  channel_.SendEvent(Dump(chunk));
}

Json GenerationCall::ChoiceUsage(int32_t c) const {
  const Choice& choice = choices_[static_cast<size_t>(c)];
  const size_t prompt = request_.prompts[static_cast<size_t>(c / request_.n)].size();
  return UsageJson(static_cast<int64_t>(prompt), choice.completion_tokens,
                   choice.usage.cached_prompt_tokens);
}

// Prompt tokens count once per prompt (not per sample), completion tokens
// over every choice; cached tokens are those of each prompt's first sample.
Json GenerationCall::TotalUsage() const {
  int64_t prompt = 0;
  int64_t completion = 0;
  int64_t cached = 0;
  for (size_t c = 0; c < choices_.size(); ++c) {
    completion += choices_[c].completion_tokens;
    if (c % static_cast<size_t>(request_.n) == 0) {
      prompt += static_cast<int64_t>(request_.prompts[c / static_cast<size_t>(request_.n)].size());
      cached += choices_[c].usage.cached_prompt_tokens;
    }
  }
  return UsageJson(prompt, completion, cached);
}

Json GenerationCall::Response() const {
  Json body = Envelope(meta_, chat_ ? "chat.completion" : "text_completion");
  Json choices = Json::array();
  for (size_t c = 0; c < choices_.size(); ++c) {
    const Choice& choice = choices_[c];
    Json entry = Json::object();
    entry["index"] = c;
    std::string finish_reason = choice.finish_reason;
    if (chat_) {
      entry["message"] = request_.tool_calling.has_value()
                             ? ToolCallMessage(choice, &finish_reason)
                             : Json{{"role", "assistant"}, {"content", choice.text}};
      entry["logprobs"] =
          choice.logprobs.is_null() && !request_.logprobs
              ? Json()
              : Json{{"content", choice.logprobs.is_null() ? Json::array() : choice.logprobs}};
    } else {
      entry["text"] = request_.echo
                          ? request_.echo_texts[c / static_cast<size_t>(request_.n)] + choice.text
                          : choice.text;
      entry["logprobs"] = choice.logprobs;
      if (request_.prompt_logprobs >= 0) entry["prompt_logprobs"] = choice.prompt_logprobs;
    }
    entry["finish_reason"] = finish_reason;
    choices.push_back(std::move(entry));
  }
  body["choices"] = std::move(choices);
  // vLLM's chat responses carry the (one) prompt's logprobs at the top level.
  if (chat_ && request_.prompt_logprobs >= 0) body["prompt_logprobs"] = choices_[0].prompt_logprobs;
  body["usage"] = TotalUsage();
  return body;
}

Json GenerationCall::ToolCallMessage(const Choice& choice, std::string* finish_reason) const {
  tool_calling::ParsedToolCalls parsed =
      tool_calling::ParseToolCalls(request_.tool_calling->format, choice.text);
  if (parsed.malformed) state_.metrics().OnToolCallParseFailure();
  const int32_t max_calls = request_.tool_calling->max_calls;
  if (max_calls > 0 && parsed.calls.size() > static_cast<size_t>(max_calls)) {
    parsed.calls.resize(static_cast<size_t>(max_calls));  // parallel_tool_calls false
  }
  Json message = Json{{"role", "assistant"},
                      {"content", parsed.content.empty() ? Json() : Json(parsed.content)}};
  if (parsed.calls.empty()) return message;
  Json calls = Json::array();
  for (tool_calling::ToolCall& call : parsed.calls) {
    calls.push_back(Json{{"id", RandomToolCallId()},
                         {"type", "function"},
                         {"function", Json{{"name", std::move(call.name)},
                                           {"arguments", std::move(call.arguments)}}}});
  }
  message["tool_calls"] = std::move(calls);
  // A text cut at max_tokens stays "length" (the client sees it was cut).
  if (*finish_reason == "stop") *finish_reason = "tool_calls";
  return message;
}

void GenerationCall::Complete() {
  done_ = true;
  if (!request_.stream) {
    channel_.Respond(200, "application/json", Dump(Response()));
    return;
  }
  if (request_.include_usage) SendChunk(Json::array(), TotalUsage());
  channel_.SendEvent("[DONE]");
  channel_.EndEventStream();
}

void GenerationCall::Fail(const absl::Status& status) {
  done_ = true;
  AbortUnfinished();
  const ApiError error = ToApiError(status, chat_ ? "messages" : "prompt");
  if (!request_.stream) {
    channel_.Respond(error.http_status, "application/json", Dump(ErrorJson(error)));
    return;
  }
  // The status line (200) is gone: the error travels as an event.
  channel_.SendEvent(Dump(ErrorJson(error)));
  channel_.SendEvent("[DONE]");
  channel_.EndEventStream();
}

}  // namespace kvserve::server::http
