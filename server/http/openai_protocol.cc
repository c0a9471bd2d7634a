#include "server/http/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/model.h"
#include "server/http/openai_constraint.h"
#include "server/request_convert.h"

namespace kvserve::server::http {
namespace {

absl::Status Invalid(std::string_view param, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(param), ": ", std::string(why)));
}

const char* TypeName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "a value of another type";
  }
}

absl::Status WrongType(std::string_view param, std::string_view expected, const Json& got) {
  return Invalid(param, absl::StrCat("must be ", std::string(expected), ", got ", TypeName(got)));
}

// The field, or null when absent or JSON null (null == absent).
const Json* Field(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status ReadBool(const Json& o, const char* key, bool* out) {
  const Json* v = Field(o, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return WrongType(key, "a boolean", *v);
  *out = v->get<bool>();
  return absl::OkStatus();
}

// An integer (a float with an integral value counts, as Python's pydantic
// accepts 2.0 for an int) in [lo, hi].
absl::Status ToInt(const Json& v, std::string_view param, int64_t lo, int64_t hi, int64_t* out) {
  int64_t value = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid(param, absl::StrCat("must be in [", lo, ", ", hi, "], got ", u));
    }
    value = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    value = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(std::floor(d) == d) || !(d >= -9.2e18 && d <= 9.2e18)) {
      return Invalid(param, absl::StrCat("must be an integer, got ", d));
    }
    value = static_cast<int64_t>(d);
  } else {
    return WrongType(param, "an integer", v);
  }
  if (value < lo || value > hi) {
    return Invalid(param, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
  }
  *out = value;
  return absl::OkStatus();
}

template <typename T>
absl::Status ReadInt(const Json& o, const char* key, int64_t lo, int64_t hi,
                     std::optional<T>* out) {
  const Json* v = Field(o, key);
  if (v == nullptr) return absl::OkStatus();
  int64_t value = 0;
  KVSERVE_RETURN_IF_ERROR(ToInt(*v, key, lo, hi, &value));
  *out = static_cast<T>(value);
  return absl::OkStatus();
}

// A number; the range is the engine's (SamplingParams::Validate).
absl::Status ReadFloat(const Json& o, const char* key, float* out) {
  const Json* v = Field(o, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return WrongType(key, "a number", *v);
  *out = static_cast<float>(v->get<double>());
  return absl::OkStatus();
}

// Token ids of one prompt, checked against the vocabulary.
absl::StatusOr<std::vector<int32_t>> ToTokenIds(const Json& array, std::string_view param,
                                                const ModelContext& model) {
  std::vector<int32_t> ids;
  ids.reserve(array.size());
  for (size_t i = 0; i < array.size(); ++i) {
    int64_t id = 0;
    KVSERVE_RETURN_IF_ERROR(ToInt(array[i], absl::StrCat(std::string(param), "[", i, "]"), 0,
                                  std::max(model.vocab_size - 1, 0), &id));
    ids.push_back(static_cast<int32_t>(id));
  }
  KVSERVE_RETURN_IF_ERROR(CheckTokenIds(ids, param, model.vocab_size));
  return ids;
}

absl::StatusOr<std::vector<int32_t>> EncodePrompt(const std::string& text, std::string_view param,
                                                  bool add_special_tokens,
                                                  const ModelContext& model) {
  if (text.empty()) return Invalid(param, "empty prompt");
  absl::StatusOr<std::vector<int32_t>> ids =
      TokenizeText(model.tokenizer, text, param, add_special_tokens);
  if (!ids.ok()) return ids.status();
  if (ids->empty()) return Invalid(param, "the prompt encodes to no tokens");
  return ids;
}

// "prompt": a string, a list of strings, a list of token ids, or a list of
// lists of token ids.
absl::Status ParsePrompts(const Json& body, bool add_special_tokens, const ModelContext& model,
                          GenerationRequest* out) {
  const Json* p = Field(body, "prompt");
  if (p == nullptr) return Invalid("prompt", "required");
  auto add_text = [&](const std::string& text, std::string_view param) -> absl::Status {
    absl::StatusOr<std::vector<int32_t>> ids = EncodePrompt(text, param, add_special_tokens, model);
    if (!ids.ok()) return ids.status();
    out->prompts.push_back(*std::move(ids));
    out->echo_texts.push_back(text);
    return absl::OkStatus();
  };
  auto add_ids = [&](const Json& array, std::string_view param) -> absl::Status {
    if (array.empty()) return Invalid(param, "empty prompt");
    absl::StatusOr<std::vector<int32_t>> ids = ToTokenIds(array, param, model);
    if (!ids.ok()) return ids.status();
    out->echo_texts.push_back(model.tokenizer == nullptr ? std::string()
                                                         : model.tokenizer->Decode(*ids, false));
    out->prompts.push_back(*std::move(ids));
    return absl::OkStatus();
  };
  if (p->is_string()) return add_text(p->get<std::string>(), "prompt");
  if (!p->is_array()) {
    return WrongType("prompt", "a string, an array of strings or an array of token ids", *p);
  }
  if (p->empty()) return Invalid("prompt", "empty prompt list");
  const Json& first = (*p)[0];
  if (first.is_number()) return add_ids(*p, "prompt");
  if (p->size() > static_cast<size_t>(kMaxChoices)) {
    return Invalid("prompt", absl::StrCat("at most ", kMaxChoices, " prompts, got ", p->size()));
  }
  for (size_t i = 0; i < p->size(); ++i) {
    const Json& item = (*p)[i];
    const std::string param = absl::StrCat("prompt[", i, "]");
    if (first.is_string() && item.is_string()) {
      KVSERVE_RETURN_IF_ERROR(add_text(item.get<std::string>(), param));
    } else if (first.is_array() && item.is_array()) {
      KVSERVE_RETURN_IF_ERROR(add_ids(item, param));
    } else {
      return WrongType(param, first.is_array() ? "an array of token ids" : "a string", item);
    }
  }
  return absl::OkStatus();
}

// One message's content as the template sees it: a string, null (e.g. an
// assistant message with tool_calls), or text parts joined with "\n" (as
// vLLM does for templates that take string content).
absl::StatusOr<Json> MessageContent(const Json& content, const std::string& param) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array())
    return WrongType(param, "a string or an array of content parts", content);
  std::vector<std::string> texts;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    const std::string part_param = absl::StrCat(param, "[", j, "]");
    if (!part.is_object()) return WrongType(part_param, "an object", part);
    const Json* type = Field(part, "type");
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "text") {
      return Invalid(absl::StrCat(part_param, ".type"), "only \"text\" parts are supported");
    }
    const Json* text = Field(part, "text");
    if (text == nullptr || !text->is_string()) {
      return WrongType(absl::StrCat(part_param, ".text"), "a string",
                       text == nullptr ? Json() : *text);
    }
    texts.push_back(text->get<std::string>());
  }
  return Json(absl::StrJoin(texts, "\n"));
}

// "messages" rendered by the checkpoint's chat template, then tokenized
// without special tokens (the template writes them), as vLLM does.
absl::StatusOr<std::vector<int32_t>> RenderMessages(const Json& body, const ModelContext& model,
                                                    bool add_special_tokens) {
  const Json* messages = Field(body, "messages");
  if (messages == nullptr) return Invalid("messages", "required");
  if (!messages->is_array()) return WrongType("messages", "an array of messages", *messages);
  if (messages->empty()) return Invalid("messages", "empty conversation");
  if (model.chat_template == nullptr) {
    return Invalid("messages",
                   model.chat_template_error.empty()
                       ? "the model has no chat template (tokenizer_config.json \"chat_template\", "
                         "chat_template.jinja or chat_template.json); use /v1/completions"
                       : absl::StrCat("the model's chat template could not be loaded: ",
                                      model.chat_template_error));
  }
  chat::OrderedChatTemplateInputs inputs;
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    const std::string param = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return WrongType(param, "an object", m);
    const Json* role = Field(m, "role");
    if (role == nullptr || !role->is_string()) {
      return WrongType(param + ".role", "a string", role == nullptr ? Json() : *role);
    }
    Json message = m;
    PrepareToolCallMessage(&message);
    const auto content = m.find("content");
    if (content != m.end()) {
      absl::StatusOr<Json> c = MessageContent(*content, param + ".content");
      if (!c.ok()) return c.status();
      message["content"] = *std::move(c);
    }
    inputs.messages.push_back(std::move(message));
  }
  if (const Json* tools = Field(body, "tools"); tools != nullptr) {
    if (!tools->is_array()) return WrongType("tools", "an array", *tools);
    inputs.tools = *tools;
  }
  if (const Json* kwargs = Field(body, "chat_template_kwargs"); kwargs != nullptr) {
    if (!kwargs->is_object()) return WrongType("chat_template_kwargs", "an object", *kwargs);
    inputs.extra_context = *kwargs;
  }
  KVSERVE_RETURN_IF_ERROR(ReadBool(body, "add_generation_prompt", &inputs.add_generation_prompt));
  KVSERVE_RETURN_IF_ERROR(ReadBool(body, "continue_final_message", &inputs.continue_final_message));
  if (inputs.continue_final_message) {
    // vLLM's rules (transformers' for the second): the final message is the
    // assistant's, and no new turn is opened after it.
    const Json* role = Field(messages->back(), "role");
    if (!(*role == "assistant")) {
      return Invalid("continue_final_message",
                     absl::StrCat("needs the last message to be the assistant's, got role \"",
                                  role->get<std::string>(), "\""));
    }
    if (inputs.add_generation_prompt) {
      return Invalid("continue_final_message",
                     "cannot be true with add_generation_prompt true (its default); send "
                     "\"add_generation_prompt\": false");
    }
  }
  absl::StatusOr<std::string> text = model.chat_template->Render(inputs);
  if (!text.ok()) return Invalid("messages", std::string(text.status().message()));
  absl::StatusOr<std::vector<int32_t>> ids =
      TokenizeText(model.tokenizer, *text, "messages", add_special_tokens);
  if (!ids.ok()) return ids.status();
  if (ids->empty()) return Invalid("messages", "the conversation renders to no tokens");
  return ids;
}

absl::Status ParseStop(const Json& body, const ModelContext& model, scheduler::StopParams* stop) {
  if (const Json* s = Field(body, "stop"); s != nullptr) {
    std::vector<std::string> stops;
    if (s->is_string()) {
      stops.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      for (size_t i = 0; i < s->size(); ++i) {
        if (!(*s)[i].is_string())
          return WrongType(absl::StrCat("stop[", i, "]"), "a string", (*s)[i]);
        stops.push_back((*s)[i].get<std::string>());
      }
    } else {
      return WrongType("stop", "a string or an array of strings", *s);
    }
    KVSERVE_RETURN_IF_ERROR(CheckStopStrings(stops, model.tokenizer, "stop"));
    stop->stop_strings = std::move(stops);
  }
  if (const Json* ids = Field(body, "stop_token_ids"); ids != nullptr) {
    if (!ids->is_array()) return WrongType("stop_token_ids", "an array of token ids", *ids);
    if (ids->size() > static_cast<size_t>(kMaxStopTokenIds)) {
      return Invalid("stop_token_ids",
                     absl::StrCat("at most ", kMaxStopTokenIds, " ids, got ", ids->size()));
    }
    absl::StatusOr<std::vector<int32_t>> parsed = ToTokenIds(*ids, "stop_token_ids", model);
    if (!parsed.ok()) return parsed.status();
    stop->stop_token_ids = *std::move(parsed);
  }
  KVSERVE_RETURN_IF_ERROR(ReadBool(body, "ignore_eos", &stop->ignore_eos));
  KVSERVE_RETURN_IF_ERROR(ReadBool(body, "skip_special_tokens", &stop->skip_special_tokens));
  std::optional<int32_t> min_tokens;
  if (absl::Status s =
          ReadInt(body, "min_tokens", 0, std::numeric_limits<int32_t>::max(), &min_tokens);
      !s.ok()) {
    return s;
  }
  if (min_tokens) stop->min_tokens = *min_tokens;
  return absl::OkStatus();
}

// "logit_bias": {"<token id>": bias, ...} (JSON keys are strings, as
// OpenAI's API sends them), each id in the vocabulary, each bias in
// [-100, 100]; sorted by id for the sampler.
absl::Status ParseLogitBias(const Json& body, const ModelContext& model,
                            std::vector<engine::TokenBias>* out) {
  const Json* v = Field(body, "logit_bias");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_object()) return WrongType("logit_bias", "an object of token id -> bias", *v);
  out->clear();
  for (const auto& [key, bias] : v->items()) {
    const std::string param = absl::StrCat("logit_bias[\"", key, "\"]");
    const bool digits = !key.empty() && std::all_of(key.begin(), key.end(),
                                                    [](char c) { return c >= '0' && c <= '9'; });
    int64_t id = 0;
    if (!digits || key.size() > 10 || !absl::SimpleAtoi(key, &id)) {
      return Invalid("logit_bias", absl::StrCat("key \"", key, "\" is not a token id"));
    }
    if (id >= model.vocab_size) {
      return Invalid("logit_bias", absl::StrCat("token id ", id, " outside the vocabulary [0, ",
                                                model.vocab_size, ")"));
    }
    if (!bias.is_number()) return WrongType(param, "a number", bias);
    out->push_back(engine::TokenBias{.token = static_cast<int32_t>(id),
                                     .bias = static_cast<float>(bias.get<double>())});
  }
  std::sort(out->begin(), out->end(), [](const engine::TokenBias& a, const engine::TokenBias& b) {
    return a.token < b.token;
  });
  for (size_t i = 1; i < out->size(); ++i) {
    if ((*out)[i - 1].token == (*out)[i].token) {
      return Invalid("logit_bias", absl::StrCat("token id ", (*out)[i].token, " given twice"));
    }
  }
  return CheckLogitBias(*out, "logit_bias", model.vocab_size);
}

absl::Status ParseSampling(const Json& body, const ModelContext& model,
                           engine::SamplingParams* sampling, std::optional<uint64_t>* seed) {
  engine::ApplySamplingDefaults(model.defaults, *sampling);
  for (auto [key, field] :
       {std::pair{"temperature", &sampling->temperature}, std::pair{"top_p", &sampling->top_p},
        std::pair{"min_p", &sampling->min_p},
        std::pair{"presence_penalty", &sampling->presence_penalty},
        std::pair{"frequency_penalty", &sampling->frequency_penalty},
        std::pair{"repetition_penalty", &sampling->repetition_penalty}}) {
    KVSERVE_RETURN_IF_ERROR(ReadFloat(body, key, field));
  }
  std::optional<int32_t> top_k;
  KVSERVE_RETURN_IF_ERROR(ReadInt(body, "top_k", -1, std::numeric_limits<int32_t>::max(), &top_k));
  if (top_k) sampling->top_k = *top_k;
  KVSERVE_RETURN_IF_ERROR(ParseLogitBias(body, model, &sampling->logit_bias));
  if (const Json* v = Field(body, "seed"); v != nullptr) {
    if (v->is_number_unsigned()) {
      *seed = v->get<uint64_t>();
    } else {
      int64_t value = 0;
      KVSERVE_RETURN_IF_ERROR(ToInt(*v, "seed", std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::max(), &value));
      *seed = static_cast<uint64_t>(value);  // two's complement, as numpy's seeds wrap
    }
  }
  // The engine's own ranges, shared with the gRPC API; its messages start
  // with the field name, which is the OpenAI parameter name too.
  return sampling->Validate();
}

absl::Status ParseLogprobs(Endpoint endpoint, const Json& body, GenerationRequest* out) {
  if (endpoint == Endpoint::kCompletions) {
    std::optional<int32_t> k;
    KVSERVE_RETURN_IF_ERROR(ReadInt(body, "logprobs", 0, engine::kMaxLogprobs, &k));
    out->logprobs = k.has_value();
    out->top_logprobs = k.value_or(0);
    return absl::OkStatus();
  }
  KVSERVE_RETURN_IF_ERROR(ReadBool(body, "logprobs", &out->logprobs));
  std::optional<int32_t> k;
  KVSERVE_RETURN_IF_ERROR(ReadInt(body, "top_logprobs", 0, engine::kMaxLogprobs, &k));
  if (k.has_value() && *k > 0 && !out->logprobs) {
    return Invalid("top_logprobs", "requires \"logprobs\": true");
  }
  out->top_logprobs = k.value_or(0);
  return absl::OkStatus();
}

absl::Status ParseStreamOptions(const Json& body, GenerationRequest* out) {
  KVSERVE_RETURN_IF_ERROR(ReadBool(body, "stream", &out->stream));
  const Json* options = Field(body, "stream_options");
  if (options == nullptr) return absl::OkStatus();
  if (!options->is_object()) return WrongType("stream_options", "an object", *options);
  if (!out->stream) return Invalid("stream_options", "only allowed with \"stream\": true");
  if (const Json* v = Field(*options, "include_usage"); v != nullptr) {
    if (!v->is_boolean()) return WrongType("stream_options.include_usage", "a boolean", *v);
    out->include_usage = v->get<bool>();
  }
  if (const Json* v = Field(*options, "continuous_usage_stats"); v != nullptr) {
    if (!v->is_boolean()) {
      return WrongType("stream_options.continuous_usage_stats", "a boolean", *v);
    }
    out->continuous_usage = v->get<bool>();
  }
  return absl::OkStatus();
}

// Fields OpenAI's API (or vLLM's extensions of it) defines that kvserve does
// not implement: a request that sets one to anything but its no-op value is
// a 400 naming it, never a 200 that ignores it (a client cannot tell an
// ignored constraint from an obeyed one). Fields nobody defines stay ignored,
// as OpenAI ignores them.
absl::Status CheckUnimplemented(Endpoint endpoint, const Json& body) {
  const auto set = [&](const char* key) { return Field(body, key) != nullptr; };
  const auto non_empty = [&](const char* key) {
    const Json* v = Field(body, key);
    return v != nullptr && !(v->is_object() && v->empty()) && !(v->is_array() && v->empty()) &&
           !(v->is_string() && v->get<std::string>().empty());
  };
  // Structured outputs (response_format, structured_outputs, guided_*) are
  // ParseConstraint's (openai_constraint.h), which refuses what it cannot honour.
  if (endpoint == Endpoint::kCompletions) {
    if (non_empty("suffix")) return Invalid("suffix", "is not implemented");
    if (const Json* best_of = Field(body, "best_of"); best_of != nullptr) {
      const Json* n = Field(body, "n");
      if (!(*best_of == (n != nullptr ? *n : Json(1)))) {
        return Invalid("best_of", "is not implemented (only best_of equal to n)");
      }
    }
    return absl::OkStatus();
  }
  // tools, tool_choice and parallel_tool_calls are ParseToolCalling's (openai_tools.h).
  if (non_empty("functions") || set("function_call")) {
    return Invalid(non_empty("functions") ? "functions" : "function_call",
                   "function calling is not implemented");
  }
  for (const char* key : {"audio", "prediction", "web_search_options"}) {
    if (set(key)) return Invalid(key, "is not implemented");
  }
  if (const Json* modalities = Field(body, "modalities");
      modalities != nullptr && !(*modalities == Json::array({"text"}))) {
    return Invalid("modalities", "is not implemented (only [\"text\"])");
  }
  return absl::OkStatus();
}

absl::Status CheckModel(const Json& body, const ModelContext& model) {
  const Json* m = Field(body, "model");
  if (m == nullptr) return absl::OkStatus();
  if (!m->is_string()) return WrongType("model", "a string", *m);
  return CheckServedModel(m->get<std::string>(), model);
}

// Throws past nlohmann's parser when the nesting is too deep; caught in
// ParseJsonBody (exceptions never leave this file).
struct TooDeep {};

}  // namespace

absl::Status CheckServedModel(std::string_view name, const ModelContext& model) {
  if (std::find(model.served_model_names.begin(), model.served_model_names.end(), name) !=
      model.served_model_names.end()) {
    return absl::OkStatus();
  }
  std::vector<std::string> quoted;
  for (const std::string& served : model.served_model_names) {
    quoted.push_back(absl::StrCat("`", served, "`"));
  }
  return absl::NotFoundError(absl::StrCat("model: the model `", std::string(name),
                                          "` does not exist; this server serves ",
                                          absl::StrJoin(quoted, ", ")));
}

scheduler::RequestParams GenerationRequest::ParamsFor(int32_t choice, uint64_t random_seed) const {
  scheduler::RequestParams params = base;
  params.prompt_tokens = prompts[static_cast<size_t>(choice / n)];
  params.sampling.seed = seed.value_or(random_seed) + static_cast<uint64_t>(choice % n);
  return params;
}

absl::StatusOr<Json> ParseJsonBody(std::string_view body) {
  Json::parser_callback_t limit_depth = [](int depth, Json::parse_event_t, Json&) -> bool {
    if (depth > kMaxJsonDepth) throw TooDeep{};
    return true;
  };
  Json json;
  try {
    json = Json::parse(body.begin(), body.end(), limit_depth);
  } catch (const TooDeep&) {
    return Invalid("body", absl::StrCat("JSON nested deeper than ", kMaxJsonDepth, " levels"));
  } catch (const Json::exception& e) {
    return Invalid("body", absl::StrCat("not valid JSON (", e.what(), ")"));
  }
  if (!json.is_object()) return WrongType("body", "a JSON object", json);
  return json;
}

absl::StatusOr<GenerationRequest> ParseGenerationRequest(Endpoint endpoint, const Json& body,
                                                         const ModelContext& model) {
  GenerationRequest out;
  out.endpoint = endpoint;
  KVSERVE_RETURN_IF_ERROR(CheckModel(body, model));
  KVSERVE_RETURN_IF_ERROR(CheckUnimplemented(endpoint, body));
  std::optional<int32_t> n;
  KVSERVE_RETURN_IF_ERROR(ReadInt(body, "n", 1, kMaxChoices, &n));
  out.n = n.value_or(1);
  KVSERVE_RETURN_IF_ERROR(ParseStreamOptions(body, &out));
  KVSERVE_RETURN_IF_ERROR(ParseLogprobs(endpoint, body, &out));
  out.base.return_logprobs = out.logprobs;
  out.base.sampling.num_logprobs = out.top_logprobs;
  std::optional<int32_t> prompt_logprobs;
  KVSERVE_RETURN_IF_ERROR(
      ReadInt(body, "prompt_logprobs", 0, engine::kMaxLogprobs, &prompt_logprobs));
  out.prompt_logprobs = prompt_logprobs.value_or(-1);

  // Sampling and stopping before the prompt: cheap checks first.
  const engine::SamplingParams before = out.base.sampling;
  engine::SamplingParams sampling;
  KVSERVE_RETURN_IF_ERROR(ParseSampling(body, model, &sampling, &out.seed));
  sampling.num_logprobs = before.num_logprobs;
  out.base.sampling = sampling;
  KVSERVE_RETURN_IF_ERROR(ParseStop(body, model, &out.base.stop));
  KVSERVE_ASSIGN_OR_RETURN(out.base.constraint, ParseConstraint(body));
  if (endpoint == Endpoint::kChat) {
    KVSERVE_ASSIGN_OR_RETURN(out.tool_calling,
                             ParseToolCalling(body, model.tool_call_format, &out.base.constraint));
    // A format whose marker is a special token of this tokenizer (Mistral's
    // [TOOL_CALLS], Hermes 2 Pro's <tool_call>): keep special tokens in the
    // text the parser reads, unless the client chose otherwise.
    if (out.tool_calling.has_value() && Field(body, "skip_special_tokens") == nullptr &&
        MarkerIsSpecialToken(out.tool_calling->format, model.tokenizer)) {
      out.base.stop.skip_special_tokens = false;
    }
  }
  std::optional<int32_t> max_tokens;
  const char* max_key = "max_tokens";
  if (endpoint == Endpoint::kChat && Field(body, "max_completion_tokens") != nullptr) {
    max_key = "max_completion_tokens";
  }
  // Completions take max_tokens 0: the prompt alone, echoed or scored.
  KVSERVE_RETURN_IF_ERROR(ReadInt(body, max_key, endpoint == Endpoint::kCompletions ? 0 : 1,
                                  std::numeric_limits<int32_t>::max(), &max_tokens));
  out.max_tokens_given = max_tokens.has_value();

  if (endpoint == Endpoint::kCompletions) {
    KVSERVE_RETURN_IF_ERROR(ReadBool(body, "echo", &out.echo));
    if (out.echo_logprobs()) {
      out.base.num_prompt_logprobs = std::max(out.prompt_logprobs, out.top_logprobs);
    }
    bool add_special = true;
    KVSERVE_RETURN_IF_ERROR(ReadBool(body, "add_special_tokens", &add_special));
    KVSERVE_RETURN_IF_ERROR(ParsePrompts(body, add_special, model, &out));
  } else {
    bool add_special = false;
    KVSERVE_RETURN_IF_ERROR(ReadBool(body, "add_special_tokens", &add_special));
    absl::StatusOr<std::vector<int32_t>> ids = RenderMessages(body, model, add_special);
    if (!ids.ok()) return ids.status();
    out.prompts.push_back(*std::move(ids));
  }
  out.base.num_prompt_logprobs = std::max(out.base.num_prompt_logprobs, out.prompt_logprobs);
  if (out.num_choices() > kMaxChoices) {
    return Invalid("n", absl::StrCat("prompts x n must be at most ", kMaxChoices, ", got ",
                                     out.num_choices()));
  }
  if (max_tokens) {
    out.base.stop.max_tokens = *max_tokens;
  } else if (endpoint == Endpoint::kCompletions) {
    out.base.stop.max_tokens = kCompletionsDefaultMaxTokens;
  } else {
    // Chat without a limit: as many tokens as the model length and the KV
    // pool leave after the prompt (vLLM's rule, bounded by the pool).
    const int64_t room = std::min<int64_t>(model.max_model_len, model.kv_capacity_tokens) -
                         static_cast<int64_t>(out.prompts[0].size());
    if (room < 1) {
      return Invalid("messages", absl::StrCat("the prompt has ", out.prompts[0].size(),
                                              " tokens, leaving no room in the model length ",
                                              model.max_model_len));
    }
    out.base.stop.max_tokens = static_cast<int32_t>(room);
  }
  if (out.base.stop.min_tokens > out.base.stop.max_tokens) {
    return Invalid("min_tokens",
                   absl::StrCat("must be at most max_tokens=", out.base.stop.max_tokens, ", got ",
                                out.base.stop.min_tokens));
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> ParseTokenizeRequest(const Json& body,
                                                          const ModelContext& model) {
  KVSERVE_RETURN_IF_ERROR(CheckModel(body, model));
  if (Field(body, "messages") != nullptr) {
    bool add_special = false;
    KVSERVE_RETURN_IF_ERROR(ReadBool(body, "add_special_tokens", &add_special));
    return RenderMessages(body, model, add_special);
  }
  const Json* prompt = Field(body, "prompt");
  if (prompt == nullptr) return Invalid("prompt", "required (or \"messages\")");
  if (!prompt->is_string()) return WrongType("prompt", "a string", *prompt);
  bool add_special = true;
  KVSERVE_RETURN_IF_ERROR(ReadBool(body, "add_special_tokens", &add_special));
  return TokenizeText(model.tokenizer, prompt->get<std::string>(), "prompt", add_special);
}

absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(const Json& body,
                                                            const ModelContext& model) {
  KVSERVE_RETURN_IF_ERROR(CheckModel(body, model));
  const Json* tokens = Field(body, "tokens");
  if (tokens == nullptr) return Invalid("tokens", "required");
  if (!tokens->is_array()) return WrongType("tokens", "an array of token ids", *tokens);
  if (model.tokenizer == nullptr) return Invalid("tokens", "the model has no tokenizer");
  return ToTokenIds(*tokens, "tokens", model);
}

ApiError ToApiError(const absl::Status& status, std::string_view prompt_param) {
  ApiError e;
  const std::string full_message(status.message());
  const std::string_view message = full_message;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      e.http_status = 400;
      e.type = "invalid_request_error";
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      e.type = "invalid_request_error";
      e.code = "invalid_api_key";
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "invalid_request_error";
      e.code = "model_not_found";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_exceeded";
      e.code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "service_unavailable";
      e.code = "service_unavailable";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      e.code = "internal_error";
      break;
  }
  e.message = std::string(message);
  if (e.http_status == 400 || e.http_status == 404) {
    // The parameter the message starts with: "name: ..." or "name must ...".
    size_t end = 0;
    while (end < message.size() && message[end] != ':' && message[end] != ' ') ++end;
    std::string_view name = message.substr(0, end);
    if (message.substr(0, 26) == "prompt_tokens + max_tokens") {
      e.param = "max_tokens";
    } else if (name == "prompt_tokens") {
      e.param = std::string(prompt_param);
    } else if (name == "stop_strings") {
      e.param = "stop";
    } else if (!name.empty() &&
               (message.substr(end, 1) == ":" || message.substr(end, 6) == " must ")) {
      e.param = std::string(name);
    }
  }
  return e;
}

Json ErrorJson(const ApiError& error) {
  Json inner = Json::object();
  inner["message"] = error.message;
  inner["type"] = error.type;
  inner["param"] = error.param.empty() ? Json() : Json(error.param);
  inner["code"] = error.code.empty() ? Json() : Json(error.code);
  Json out = Json::object();
  out["error"] = std::move(inner);
  return out;
}

std::string Dump(const Json& json) {
  // ensure_ascii: every non-ASCII character as a \uXXXX escape (as Python's
  // json.dumps does by default). Clients that read SSE with str.splitlines
  // semantics (httpx's aiter_lines: GuideLLM, ...) also break lines at U+0085,
  // U+2028 and U+2029, so a raw one inside generated text would cut a data
  // line in two; escaped, a body or data line is one line for every reader.
  return json.dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
}

}  // namespace kvserve::server::http
