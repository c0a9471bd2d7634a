#include "server/http/openai_format.h"

#include <utility>

namespace kvserve::server::http {
namespace {

std::string TokenBytes(const engine::Tokenizer* tokenizer, int32_t id) {
  std::string bytes;
  if (tokenizer != nullptr) tokenizer->AppendTokenBytes(id, /*first=*/false, false, &bytes);
  return bytes;
}

std::string TokenText(const engine::Tokenizer* tokenizer, int32_t id) {
  return engine::ToValidUtf8(TokenBytes(tokenizer, id));
}

Json BytesArray(const std::string& bytes) {
  Json out = Json::array();
  for (unsigned char c : bytes) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

std::optional<std::string> FinishReasonString(scheduler::FinishReason reason) {
  switch (reason) {
    case scheduler::FinishReason::kStopToken:
    case scheduler::FinishReason::kStopString:
      return "stop";
    case scheduler::FinishReason::kLength:
      return "length";
    default:
      return std::nullopt;
  }
}

Json UsageJson(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  Json usage = Json::object();
  usage["prompt_tokens"] = prompt_tokens;
  usage["completion_tokens"] = completion_tokens;
  usage["total_tokens"] = prompt_tokens + completion_tokens;
  Json details = Json::object();
  details["cached_tokens"] = cached_tokens;
  usage["prompt_tokens_details"] = std::move(details);
  return usage;
}

int64_t CodePoints(std::string_view utf8) {
  int64_t n = 0;
  for (unsigned char c : utf8) n += (c & 0xC0) != 0x80;
  return n;
}

Json CompletionLogprobs(std::span<const scheduler::TokenLogprobs> logprobs,
                        const engine::Tokenizer* tokenizer, int64_t* text_offset) {
  Json tokens = Json::array();
  Json token_logprobs = Json::array();
  Json top_logprobs = Json::array();
  Json offsets = Json::array();
  for (const scheduler::TokenLogprobs& lp : logprobs) {
    const std::string text = TokenText(tokenizer, lp.token);
    tokens.push_back(text);
    token_logprobs.push_back(lp.logprob);
    Json top = Json::object();
    for (const engine::TokenLogprob& t : lp.top) top[TokenText(tokenizer, t.token)] = t.logprob;
    top_logprobs.push_back(std::move(top));
    offsets.push_back(*text_offset);
    *text_offset += CodePoints(text);
  }
  Json out = Json::object();
  out["tokens"] = std::move(tokens);
  out["token_logprobs"] = std::move(token_logprobs);
  out["top_logprobs"] = std::move(top_logprobs);
  out["text_offset"] = std::move(offsets);
  return out;
}

Json EchoedPromptLogprobs(std::span<const int32_t> prompt,
                          std::span<const scheduler::TokenLogprobs> scored, int32_t num_top,
                          const engine::Tokenizer* tokenizer, int64_t* text_offset) {
  Json out = Json::object();
  out["tokens"] = Json::array();
  out["token_logprobs"] = Json::array();
  out["top_logprobs"] = Json::array();
  out["text_offset"] = Json::array();
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::string text = TokenText(tokenizer, prompt[i]);
    out["tokens"].push_back(text);
    out["text_offset"].push_back(*text_offset);
    *text_offset += CodePoints(text);
    if (i == 0 || i > scored.size()) {  // no context (or not scored: never when complete)
      out["token_logprobs"].push_back(nullptr);
      out["top_logprobs"].push_back(nullptr);
      continue;
    }
    const scheduler::TokenLogprobs& lp = scored[i - 1];
    out["token_logprobs"].push_back(lp.logprob);
    Json top = Json::object();
    for (size_t k = 0; k < lp.top.size() && k < static_cast<size_t>(num_top); ++k) {
      top[TokenText(tokenizer, lp.top[k].token)] = lp.top[k].logprob;
    }
    out["top_logprobs"].push_back(std::move(top));
  }
  return out;
}

Json VllmPromptLogprobs(std::span<const scheduler::TokenLogprobs> scored, int32_t num_top,
                        const engine::Tokenizer* tokenizer) {
  const auto entry = [&](int32_t token, float logprob, int64_t rank) {
    Json e = Json::object();
    e["logprob"] = logprob;
    e["rank"] = rank;
    e["decoded_token"] = TokenText(tokenizer, token);
    return e;
  };
  Json out = Json::array({nullptr});
  for (const scheduler::TokenLogprobs& lp : scored) {
    Json position = Json::object();
    position[std::to_string(lp.token)] = entry(lp.token, lp.logprob, lp.rank);
    for (size_t k = 0; k < lp.top.size() && k < static_cast<size_t>(num_top); ++k) {
      position[std::to_string(lp.top[k].token)] =
          entry(lp.top[k].token, lp.top[k].logprob, static_cast<int64_t>(k) + 1);
    }
    out.push_back(std::move(position));
  }
  return out;
}

void AppendCompletionLogprobs(const Json& more, Json* into) {
  if (into->is_null()) {
    *into = more;
    return;
  }
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
    for (const Json& v : more[key]) (*into)[key].push_back(v);
  }
}

Json ChatLogprobContent(std::span<const scheduler::TokenLogprobs> logprobs,
                        const engine::Tokenizer* tokenizer) {
  Json content = Json::array();
  for (const scheduler::TokenLogprobs& lp : logprobs) {
    const std::string bytes = TokenBytes(tokenizer, lp.token);
    Json entry = Json::object();
    entry["token"] = engine::ToValidUtf8(bytes);
    entry["logprob"] = lp.logprob;
    entry["bytes"] = BytesArray(bytes);
    Json top = Json::array();
    for (const engine::TokenLogprob& t : lp.top) {
      const std::string top_bytes = TokenBytes(tokenizer, t.token);
      Json e = Json::object();
      e["token"] = engine::ToValidUtf8(top_bytes);
      e["logprob"] = t.logprob;
      e["bytes"] = BytesArray(top_bytes);
      top.push_back(std::move(e));
    }
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return content;
}

Json Envelope(const ResponseMeta& meta, std::string_view object) {
  Json out = Json::object();
  out["id"] = meta.id;
  out["object"] = std::string(object);
  out["created"] = meta.created;
  out["model"] = meta.model;
  return out;
}

}  // namespace kvserve::server::http
