#include "server/http/openai_render.h"

#include <charconv>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvserve::server::http {
namespace {

// A float as the double of its shortest decimal form (0.3f as 0.3, not
// 0.30000001192092896), so that the values read back as the client sent them.
Json FloatJson(float value) {
  char buffer[32];
  const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return Json(std::strtod(std::string(buffer, r.ptr).c_str(), nullptr));
}

}  // namespace

Json SamplingParamsJson(const GenerationRequest& request) {
  const engine::SamplingParams& s = request.base.sampling;
  const scheduler::StopParams& stop = request.base.stop;
  Json out = Json::object();
  out["n"] = request.n;
  out["temperature"] = FloatJson(s.temperature);
  out["top_p"] = FloatJson(s.top_p);
  out["top_k"] = s.top_k;
  out["min_p"] = FloatJson(s.min_p);
  out["presence_penalty"] = FloatJson(s.presence_penalty);
  out["frequency_penalty"] = FloatJson(s.frequency_penalty);
  out["repetition_penalty"] = FloatJson(s.repetition_penalty);
  out["seed"] = request.seed.has_value() ? Json(*request.seed) : Json();
  out["stop"] = stop.stop_strings;
  out["stop_token_ids"] = stop.stop_token_ids;
  out["ignore_eos"] = stop.ignore_eos;
  out["max_tokens"] = stop.max_tokens;
  out["min_tokens"] = stop.min_tokens;
  out["logprobs"] = request.logprobs ? Json(request.top_logprobs) : Json();
  out["skip_special_tokens"] = stop.skip_special_tokens;
  Json bias = Json::object();
  for (const engine::TokenBias& b : s.logit_bias) bias[std::to_string(b.token)] = FloatJson(b.bias);
  out["logit_bias"] = s.logit_bias.empty() ? Json() : std::move(bias);
  return out;
}

Json RenderResponse(const GenerationRequest& request, const ModelContext& model,
                    std::string_view request_id_base) {
  const Json sampling = SamplingParamsJson(request);
  Json stream_options;
  if (request.stream) {
    stream_options = Json::object();
    stream_options["include_usage"] = request.include_usage;
    stream_options["continuous_usage_stats"] = request.continuous_usage;
  }
  const bool chat = request.endpoint == Endpoint::kChat;
  Json list = Json::array();
  for (size_t i = 0; i < request.prompts.size(); ++i) {
    Json item = Json::object();
    item["request_id"] =
        chat ? std::string(request_id_base) : absl::StrCat(std::string(request_id_base), "-", i);
    item["token_ids"] = request.prompts[i];
    if (chat) item["features"] = nullptr;
    item["sampling_params"] = sampling;
    item["model"] = model.model_name;
    item["stream"] = request.stream;
    item["stream_options"] = stream_options;
    list.push_back(std::move(item));
  }
  return chat ? list.at(0) : list;
}

}  // namespace kvserve::server::http
