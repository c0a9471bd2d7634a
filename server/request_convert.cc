#include "server/request_convert.h"

#include <utf8proc.h>

#include <algorithm>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/model.h"
#include "server/status_map.h"
#include "xgrammar/grammar.h"

namespace kvserve::server {
namespace {

absl::Status Invalid(std::string_view field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": ", why));
}

absl::Status CheckLength(std::string_view text, std::string_view field, size_t max_bytes) {
  if (text.size() > max_bytes) {
    return Invalid(field, absl::StrCat("at most ", max_bytes, " bytes, got ", text.size()));
  }
  return CheckUtf8(text, field);
}

absl::Status ConvertStopping(const v1::StoppingParams& in, int32_t vocab_size,
                             const engine::Tokenizer* tokenizer, scheduler::StopParams* out) {
  out->max_tokens = in.max_tokens();
  out->min_tokens = in.min_tokens();
  out->ignore_eos = in.ignore_eos();
  out->skip_special_tokens = in.skip_special_tokens();
  if (in.stop_token_ids_size() > kMaxStopTokenIds) {
    return Invalid("stopping.stop_token_ids", absl::StrCat("at most ", kMaxStopTokenIds,
                                                           " ids, got ", in.stop_token_ids_size()));
  }
  KVSERVE_RETURN_IF_ERROR(
      CheckTokenIds(in.stop_token_ids(), "stopping.stop_token_ids", vocab_size));
  out->stop_token_ids.assign(in.stop_token_ids().begin(), in.stop_token_ids().end());
  std::vector<std::string> stops(in.stop().begin(), in.stop().end());
  KVSERVE_RETURN_IF_ERROR(CheckStopStrings(stops, tokenizer, "stopping.stop"));
  out->stop_strings = std::move(stops);
  return absl::OkStatus();
}

// The model's defaults first, then every field the request sets (an unset
// field keeps the model's default, else the proto's, which equals
// engine::SamplingParams' own).
void ConvertSampling(const v1::SamplingParams& in, const engine::SamplingDefaults& defaults,
                     engine::SamplingParams* out) {
  engine::ApplySamplingDefaults(defaults, *out);
  if (in.has_temperature()) out->temperature = in.temperature();
  if (in.has_top_k()) out->top_k = in.top_k();
  if (in.has_top_p()) out->top_p = in.top_p();
  if (in.has_min_p()) out->min_p = in.min_p();
  if (in.has_repetition_penalty()) out->repetition_penalty = in.repetition_penalty();
  out->presence_penalty = in.presence_penalty();
  out->frequency_penalty = in.frequency_penalty();
  out->seed = in.seed();
  // Map order is unspecified; the sampler takes ascending ids.
  out->logit_bias.clear();
  for (const auto& [token, bias] : in.logit_bias()) {
    out->logit_bias.push_back(engine::TokenBias{.token = token, .bias = bias});
  }
  std::sort(
      out->logit_bias.begin(), out->logit_bias.end(),
      [](const engine::TokenBias& a, const engine::TokenBias& b) { return a.token < b.token; });
}

}  // namespace

absl::Status CheckUtf8(std::string_view text, std::string_view field) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n =
        utf8proc_iterate(bytes + i, static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (n <= 0 || cp < 0) {
      return Invalid(field, absl::StrCat("not valid UTF-8 (byte offset ", i, ")"));
    }
    i += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status CheckTokenIds(std::span<const int32_t> ids, std::string_view field,
                           int32_t vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return Invalid(absl::StrCat(std::string(field), "[", i, "]"),
                     absl::StrCat("id ", ids[i], " outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTokenIds(const google::protobuf::RepeatedField<int32_t>& ids,
                           std::string_view field, int32_t vocab_size) {
  return CheckTokenIds(std::span<const int32_t>(ids.data(), static_cast<size_t>(ids.size())), field,
                       vocab_size);
}

absl::Status CheckLogitBias(std::span<const engine::TokenBias> logit_bias, std::string_view field,
                            int32_t vocab_size) {
  for (const engine::TokenBias& entry : logit_bias) {
    if (entry.token < 0 || entry.token >= vocab_size) {
      return Invalid(field, absl::StrCat("token id ", entry.token, " outside the vocabulary [0, ",
                                         vocab_size, ")"));
    }
    if (!(entry.bias >= -engine::kMaxLogitBias && entry.bias <= engine::kMaxLogitBias)) {
      return Invalid(field, absl::StrCat("bias of token ", entry.token, " must be in [",
                                         -engine::kMaxLogitBias, ", ", engine::kMaxLogitBias,
                                         "], got ", entry.bias));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckStopStrings(std::span<const std::string> stops,
                              const engine::Tokenizer* tokenizer, std::string_view field) {
  if (stops.size() > static_cast<size_t>(kMaxStopStrings)) {
    return Invalid(field,
                   absl::StrCat("at most ", kMaxStopStrings, " stop strings, got ", stops.size()));
  }
  if (!stops.empty() && tokenizer == nullptr) {
    return Invalid(field, "the model has no tokenizer, so no text to match");
  }
  for (size_t i = 0; i < stops.size(); ++i) {
    const std::string name = absl::StrCat(std::string(field), "[", i, "]");
    if (stops[i].empty()) return Invalid(name, "empty stop string");
    KVSERVE_RETURN_IF_ERROR(CheckLength(stops[i], name, kMaxStopStringBytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> TokenizeText(const engine::Tokenizer* tokenizer,
                                                  std::string_view text, std::string_view field,
                                                  bool add_special_tokens) {
  if (tokenizer == nullptr) return Invalid(field, "the model has no tokenizer; send token ids");
  KVSERVE_RETURN_IF_ERROR(CheckUtf8(text, field));
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(text, add_special_tokens);
  if (!ids.ok()) return Invalid(field, std::string(ids.status().message()));
  return ids;
}

absl::StatusOr<scheduler::RequestParams> ToRequestParams(const v1::GenerateRequest& request,
                                                         const engine::Tokenizer* tokenizer,
                                                         int32_t vocab_size,
                                                         const engine::SamplingDefaults& defaults) {
  scheduler::RequestParams params;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText: {
      if (request.text().empty()) return Invalid("text", "empty prompt");
      KVSERVE_ASSIGN_OR_RETURN(params.prompt_tokens, TokenizeText(tokenizer, request.text(), "text",
                                                                  request.add_special_tokens()));
      if (params.prompt_tokens.empty()) return Invalid("text", "the prompt encodes to no tokens");
      break;
    }
    case v1::GenerateRequest::kTokenIds: {
      const auto& ids = request.token_ids().ids();
      if (ids.empty()) return Invalid("token_ids", "empty prompt");
      KVSERVE_RETURN_IF_ERROR(CheckTokenIds(ids, "token_ids.ids", vocab_size));
      params.prompt_tokens.assign(ids.begin(), ids.end());
      break;
    }
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return Invalid("prompt", "set either text or token_ids");
  }
  ConvertSampling(request.sampling(), defaults, &params.sampling);
  KVSERVE_RETURN_IF_ERROR(
      CheckLogitBias(params.sampling.logit_bias, "sampling.logit_bias", vocab_size));
  if (request.has_logprobs()) {
    if (request.logprobs() < 0 || request.logprobs() > engine::kMaxLogprobs) {
      return Invalid("logprobs", absl::StrCat("must be in [0, ", engine::kMaxLogprobs, "], got ",
                                              request.logprobs()));
    }
    params.return_logprobs = true;
    params.sampling.num_logprobs = request.logprobs();
  }
  if (request.has_prompt_logprobs()) {
    if (request.prompt_logprobs() < 0 || request.prompt_logprobs() > engine::kMaxLogprobs) {
      return Invalid("prompt_logprobs", absl::StrCat("must be in [0, ", engine::kMaxLogprobs,
                                                     "], got ", request.prompt_logprobs()));
    }
    params.num_prompt_logprobs = request.prompt_logprobs();
  }
  KVSERVE_RETURN_IF_ERROR(ConvertStopping(request.stopping(), vocab_size, tokenizer, &params.stop));
  KVSERVE_RETURN_IF_ERROR(CheckLength(request.request_id(), "request_id", kMaxRequestIdBytes));
  KVSERVE_RETURN_IF_ERROR(CheckLength(request.cache_salt(), "cache_salt", kMaxCacheSaltBytes));
  params.priority = request.priority();
  params.cache_salt = request.cache_salt();
  KVSERVE_ASSIGN_OR_RETURN(params.constraint, ToConstraint(request));
  return params;
}

absl::Status CheckConstraint(const engine::grammar::Constraint& constraint,
                             std::string_view field) {
  using engine::grammar::ConstraintKind;
  if (constraint.kind == ConstraintKind::kChoice) {
    if (constraint.choices.empty()) return Invalid(field, "the list of choices is empty");
    if (constraint.choices.size() > static_cast<size_t>(kMaxConstraintChoices)) {
      return Invalid(field, absl::StrCat("at most ", kMaxConstraintChoices, " choices, got ",
                                         constraint.choices.size()));
    }
    size_t total = 0;
    for (size_t i = 0; i < constraint.choices.size(); ++i) {
      const std::string name = absl::StrCat(std::string(field), "[", i, "]");
      if (constraint.choices[i].empty()) return Invalid(name, "empty choice");
      KVSERVE_RETURN_IF_ERROR(CheckUtf8(constraint.choices[i], name));
      total += constraint.choices[i].size();
    }
    if (total > static_cast<size_t>(kMaxConstraintBytes)) {
      return Invalid(field, absl::StrCat("the choices total ", total, " bytes, more than ",
                                         kMaxConstraintBytes));
    }
  } else if (constraint.kind != ConstraintKind::kJsonObject) {
    if (constraint.text.empty()) return Invalid(field, "empty");
    KVSERVE_RETURN_IF_ERROR(CheckLength(constraint.text, field, kMaxConstraintBytes));
  }
  absl::StatusOr<xgrammar::Grammar> grammar = engine::grammar::BuildGrammar(constraint);
  if (!grammar.ok()) return Invalid(field, std::string(grammar.status().message()));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<engine::grammar::Constraint>> ToConstraint(
    const v1::GenerateRequest& request) {
  using engine::grammar::ConstraintKind;
  engine::grammar::Constraint c;
  std::string_view field;
  switch (request.constraint_case()) {
    case v1::GenerateRequest::CONSTRAINT_NOT_SET:
      return std::nullopt;
    case v1::GenerateRequest::kJsonObject:
      if (!request.json_object()) return Invalid("json_object", "must be true when set");
      c.kind = ConstraintKind::kJsonObject;
      field = "json_object";
      break;
    case v1::GenerateRequest::kJsonSchema:
      if (!request.json_schema().has_schema()) return Invalid("json_schema.schema", "required");
      c.kind = ConstraintKind::kJsonSchema;
      c.text = request.json_schema().schema();
      c.strict = request.json_schema().strict();
      field = "json_schema.schema";
      break;
    case v1::GenerateRequest::kRegex:
      c.kind = ConstraintKind::kRegex;
      c.text = request.regex();
      field = "regex";
      break;
    case v1::GenerateRequest::kChoice:
      c.kind = ConstraintKind::kChoice;
      c.choices.assign(request.choice().choices().begin(), request.choice().choices().end());
      field = "choice.choices";
      break;
    case v1::GenerateRequest::kGrammar:
      c.kind = ConstraintKind::kGrammar;
      c.text = request.grammar();
      field = "grammar";
      break;
  }
  KVSERVE_RETURN_IF_ERROR(CheckConstraint(c, field));
  return c;
}

v1::FinishReason ToProto(scheduler::FinishReason reason) {
  using scheduler::FinishReason;
  switch (reason) {
    case FinishReason::kStopToken:
    case FinishReason::kStopString:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kAborted:
    case FinishReason::kRejected:
      return v1::FINISH_REASON_ABORTED;
    case FinishReason::kExpired:
      return v1::FINISH_REASON_DEADLINE;
    case FinishReason::kError:
      return v1::FINISH_REASON_ERROR;
    case FinishReason::kNone:
      break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

void AppendOutput(const scheduler::RequestOutput& output, v1::GenerateResponse* response) {
  for (int32_t id : output.token_ids) response->add_token_ids(id);
  response->mutable_text()->append(output.text);
  const auto add = [](const scheduler::TokenLogprobs& lp, v1::TokenLogprob* p) {
    p->set_token_id(lp.token);
    p->set_logprob(lp.logprob);
    if (lp.rank > 0) p->set_rank(lp.rank);
    for (const engine::TokenLogprob& top : lp.top) {
      v1::TopLogprob* t = p->add_top();
      t->set_token_id(top.token);
      t->set_logprob(top.logprob);
    }
  };
  for (const scheduler::TokenLogprobs& lp : output.logprobs) add(lp, response->add_logprobs());
  for (const scheduler::TokenLogprobs& lp : output.prompt_logprobs) {
    add(lp, response->add_prompt_logprobs());
  }
  if (!output.finished) return;
  response->set_finished(true);
  response->set_finish_reason(ToProto(output.finish_reason));
  if (output.finish_reason == scheduler::FinishReason::kStopString) {
    response->set_stop_string(output.stop_string);
  }
  if (output.finish_reason == scheduler::FinishReason::kStopToken) {
    response->set_stop_token(output.stop_token);
  }
  v1::Usage* usage = response->mutable_usage();
  usage->set_prompt_tokens(output.usage.prompt_tokens);
  usage->set_cached_prompt_tokens(output.usage.cached_prompt_tokens);
  usage->set_completion_tokens(output.usage.completion_tokens);
  v1::Timings* timings = response->mutable_timings();
  timings->set_queue_s(output.timings.queue_s);
  timings->set_time_to_first_token_s(output.timings.time_to_first_token_s);
  timings->set_e2e_s(output.timings.e2e_s);
}

grpc::Status FinalStatus(const scheduler::RequestOutput& final_output) {
  using scheduler::FinishReason;
  switch (final_output.finish_reason) {
    case FinishReason::kExpired:
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "the deadline passed before the request finished");
    case FinishReason::kAborted:
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "the request was aborted: the server is shutting down");
    case FinishReason::kError:
      return grpc::Status(grpc::StatusCode::INTERNAL, std::string(final_output.status.message()));
    case FinishReason::kRejected:
      return ToGrpcStatus(final_output.status);
    default:
      return grpc::Status::OK;
  }
}

}  // namespace kvserve::server
