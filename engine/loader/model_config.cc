// Parsing of Hugging Face config.json into ModelConfig: the family, the fields
// every family shares, and the Llama family's own; rope fields are in
// model_config_rope.cc, the other families' in model_config_families.cc.
// Every accessor checks the JSON type before reading, so nlohmann never
// throws out of here; the only exception caught is the parse error of
// LoadModelConfig.
#include "engine/loader/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/loader/model_config_internal.h"
#include "nlohmann/json.hpp"

namespace kvserve::engine {
namespace {

using config_internal::FieldReader;
using config_internal::Json;

// One supported family: its config "model_type" and its causal-LM class.
struct Family {
  const char* model_type;
  const char* architecture;
};
constexpr Family kFamilies[] = {
    {"llama", "LlamaForCausalLM"},        {"mistral", "MistralForCausalLM"},
    {"qwen2", "Qwen2ForCausalLM"},        {"qwen3", "Qwen3ForCausalLM"},
    {"phi3", "Phi3ForCausalLM"},          {"gemma2", "Gemma2ForCausalLM"},
    {"gemma3_text", "Gemma3ForCausalLM"},
};
constexpr char kSupportedArchitectures[] =
    "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, "
    "Gemma2ForCausalLM, Gemma3ForCausalLM";
constexpr char kSupportedModelTypes[] = "llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text";

bool IsGemma(const ModelConfig& c) {
  return c.model_type == "gemma2" || c.model_type == "gemma3_text";
}

absl::Status ResolveFamily(const FieldReader& r, const std::string& source, ModelConfig& c) {
  std::optional<std::string> model_type;
  KVSERVE_ASSIGN_OR_RETURN(model_type, r.OptionalString("model_type"));
  std::optional<std::string> architecture;
  if (const Json* archs = r.Get("architectures")) {
    if (!archs->is_array() || (!archs->empty() && !(*archs)[0].is_string())) {
      return r.Error("architectures", "must be a list of class names");
    }
    if (!archs->empty()) architecture = (*archs)[0].get<std::string>();
  }
  const Family* by_type = nullptr;
  const Family* by_arch = nullptr;
  for (const Family& f : kFamilies) {
    if (model_type == f.model_type) by_type = &f;
    if (architecture == f.architecture) by_arch = &f;
  }
  if (architecture && by_arch == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": unsupported architecture \"", *architecture,
                     "\" (supported: ", kSupportedArchitectures, ")"));
  }
  if (model_type && by_type == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": unsupported model_type \"",
                                                   *model_type,
                                                   "\" (supported: ", kSupportedModelTypes, ")"));
  }
  if (by_type == nullptr && by_arch == nullptr) return r.Missing("model_type");
  if (by_type != nullptr && by_arch != nullptr && by_type != by_arch) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": architecture \"", *architecture,
                                                   "\" does not match model_type \"", *model_type,
                                                   "\""));
  }
  // transformers builds the model from model_type; architectures only names it.
  const Family& f = by_type != nullptr ? *by_type : *by_arch;
  c.model_type = f.model_type;
  c.architecture = f.architecture;
  return absl::OkStatus();
}

absl::Status ParseTokenIds(const FieldReader& r, ModelConfig& c) {
  c.bos_token_id = -1;
  if (const Json* bos = r.Get("bos_token_id")) {
    KVSERVE_ASSIGN_OR_RETURN(c.bos_token_id, r.TokenId("bos_token_id", *bos));
  }
  c.eos_token_ids.clear();
  if (const Json* eos = r.Get("eos_token_id")) {
    if (eos->is_array()) {
      for (const Json& id : *eos) {
        int32_t value = 0;
        KVSERVE_ASSIGN_OR_RETURN(value, r.TokenId("eos_token_id", id));
        c.eos_token_ids.push_back(value);
      }
    } else {
      int32_t value = 0;
      KVSERVE_ASSIGN_OR_RETURN(value, r.TokenId("eos_token_id", *eos));
      c.eos_token_ids.push_back(value);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseInto(const Json& json, const std::string& source, ModelConfig& c) {
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": top level is not a JSON object"));
  }
  const FieldReader r(json, source, "");
  KVSERVE_RETURN_IF_ERROR(ResolveFamily(r, source, c));

  if (!IsGemma(c)) {  // Gemma reads hidden_activation (ParseGemma)
    std::optional<std::string> act;
    KVSERVE_ASSIGN_OR_RETURN(act, r.OptionalString("hidden_act"));
    if (act && *act != "silu") {
      return r.Error("hidden_act", absl::StrCat("\"", *act, "\" is not supported (only \"silu\")"));
    }
  }

  KVSERVE_ASSIGN_OR_RETURN(c.vocab_size, r.RequiredInt("vocab_size"));
  KVSERVE_ASSIGN_OR_RETURN(c.hidden_size, r.RequiredInt("hidden_size"));
  KVSERVE_ASSIGN_OR_RETURN(c.intermediate_size, r.RequiredInt("intermediate_size"));
  KVSERVE_ASSIGN_OR_RETURN(c.num_layers, r.RequiredInt("num_hidden_layers"));
  KVSERVE_ASSIGN_OR_RETURN(c.num_heads, r.RequiredInt("num_attention_heads"));
  KVSERVE_ASSIGN_OR_RETURN(c.num_kv_heads, r.Int("num_key_value_heads", c.num_heads));
  KVSERVE_ASSIGN_OR_RETURN(c.max_position_embeddings, r.RequiredInt("max_position_embeddings"));
  KVSERVE_ASSIGN_OR_RETURN(c.rms_norm_eps, r.Double("rms_norm_eps", 1e-6));
  KVSERVE_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));

  std::optional<int64_t> head_dim;
  KVSERVE_ASSIGN_OR_RETURN(head_dim, r.OptionalInt("head_dim"));
  if (head_dim) {
    c.head_dim = *head_dim;
  } else if (c.model_type == "qwen3") {
    c.head_dim = 128;  // Qwen3Config's default, not hidden / heads
  } else if (IsGemma(c)) {
    c.head_dim = 256;  // Gemma2Config / Gemma3TextConfig default
  } else if (c.num_heads > 0 && c.hidden_size % c.num_heads == 0) {
    c.head_dim = c.hidden_size / c.num_heads;
  } else {
    return r.Error("head_dim",
                   absl::StrCat("missing and hidden_size ", c.hidden_size,
                                " is not a multiple of num_attention_heads ", c.num_heads));
  }

  // Biases, sliding windows and the other features differ per family
  // (transformers' modeling code).
  c.qkv_bias = c.o_proj_bias = false;
  c.sliding_window = 0;
  if (IsGemma(c)) {
    KVSERVE_RETURN_IF_ERROR(config_internal::ParseGemma(r, source, c));  // reads its rope too
  } else {
    KVSERVE_RETURN_IF_ERROR(config_internal::ParseRope(r, source, c));
  }
  if (c.model_type == "llama") {
    bool attention_bias = false;
    KVSERVE_ASSIGN_OR_RETURN(attention_bias, r.Bool("attention_bias", false));
    c.qkv_bias = c.o_proj_bias = attention_bias;
    bool mlp_bias = false;
    KVSERVE_ASSIGN_OR_RETURN(mlp_bias, r.Bool("mlp_bias", false));
    if (mlp_bias) return r.Error("mlp_bias", "true is not supported");
  } else if (c.model_type == "mistral") {
    std::optional<int64_t> window;
    KVSERVE_ASSIGN_OR_RETURN(window, r.OptionalInt("sliding_window"));
    c.sliding_window = window.value_or(0);
  } else if (c.model_type == "qwen2") {
    c.qkv_bias = true;  // Qwen2Attention: q/k/v always biased, o_proj never
    KVSERVE_RETURN_IF_ERROR(config_internal::ParseQwenSlidingWindow(r, source, c));
  } else if (c.model_type == "qwen3") {
    KVSERVE_RETURN_IF_ERROR(config_internal::ParseQwen3(r, source, c));
  } else if (c.model_type == "phi3") {
    KVSERVE_RETURN_IF_ERROR(config_internal::ParsePhi3(r, source, c));
  }

  KVSERVE_RETURN_IF_ERROR(ParseTokenIds(r, c));
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ModelConfig::Validate() const {
  auto fail = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  const std::pair<const char*, int64_t> positive[] = {
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_layers},
      {"num_attention_heads", num_heads},
      {"num_key_value_heads", num_kv_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings", max_position_embeddings},
  };
  for (const auto& [name, value] : positive) {
    if (value <= 0) return fail("field \"", name, "\" must be positive, got ", value);
  }
  if (num_heads % num_kv_heads != 0) {
    return fail("num_attention_heads ", num_heads, " is not a multiple of num_key_value_heads ",
                num_kv_heads);
  }
  if (head_dim % 2 != 0) return fail("head_dim ", head_dim, " must be even (rotary pairs)");
  if (vocab_size > INT32_MAX) return fail("vocab_size ", vocab_size, " does not fit int32");
  if (!(rms_norm_eps > 0.0) || !std::isfinite(rms_norm_eps)) {
    return fail("rms_norm_eps must be positive, got ", rms_norm_eps);
  }
  if (!(rope_theta > 0.0) || !std::isfinite(rope_theta)) {
    return fail("rope_theta must be positive, got ", rope_theta);
  }
  if (sliding_window < 0) return fail("sliding_window must be >= 0, got ", sliding_window);
  if (!sliding_layers.empty() && static_cast<int64_t>(sliding_layers.size()) != num_layers) {
    return fail("layer_types lists ", sliding_layers.size(), " layers, the model has ", num_layers);
  }
  if (!(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0) || RotaryDim() % 2 != 0 ||
      RotaryDim() == 0) {
    return fail("partial_rotary_factor ", partial_rotary_factor, " must be in (0, 1] and give ",
                "an even rotary dimension (head_dim ", head_dim, ")");
  }
  for (const auto& [name, value] :
       {std::pair<const char*, double>{"query_pre_attn_scalar", query_pre_attn_scalar},
        {"attn_logit_softcapping", attn_logit_softcapping},
        {"final_logit_softcapping", final_logit_softcapping},
        {"rope_local_base_freq", local_rope_theta}}) {
    if (!(value >= 0.0) || !std::isfinite(value)) {
      return fail(name, " must be positive (or 0: unset), got ", value);
    }
  }
  const RopeScaling& s = rope_scaling;
  if (s.type != RopeScaling::Type::kNone && (!(s.factor > 0.0) || !std::isfinite(s.factor))) {
    return fail("rope factor must be positive, got ", s.factor);
  }
  if (s.type == RopeScaling::Type::kLongRope) {
    const size_t half = static_cast<size_t>(RotaryDim() / 2);
    if (s.short_factor.size() != half || s.long_factor.size() != half) {
      return fail("longrope short_factor and long_factor need rotary_dim / 2 = ", half,
                  " elements, got ", s.short_factor.size(), " and ", s.long_factor.size());
    }
    if (s.original_max_position_embeddings <= 0 || !(s.attention_factor > 0.0)) {
      return fail("longrope needs positive original_max_position_embeddings and attention_factor");
    }
  }
  if (s.type == RopeScaling::Type::kLlama3) {
    if (!(s.low_freq_factor > 0.0) || !(s.high_freq_factor > s.low_freq_factor)) {
      return fail("llama3 rope needs 0 < low_freq_factor < high_freq_factor, got ",
                  s.low_freq_factor, " and ", s.high_freq_factor);
    }
    if (s.original_max_position_embeddings <= 0) {
      return fail("original_max_position_embeddings must be positive, got ",
                  s.original_max_position_embeddings);
    }
  }
  if (bos_token_id < -1 || bos_token_id >= vocab_size) {
    return fail("bos_token_id ", bos_token_id, " is outside the vocabulary [0, ", vocab_size, ")");
  }
  for (int32_t id : eos_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return fail("eos_token_id ", id, " is outside the vocabulary [0, ", vocab_size, ")");
    }
  }
  return absl::OkStatus();
}

float ModelConfig::AttentionScale() const {
  // transformers: head_dim**-0.5 or query_pre_attn_scalar**-0.5 (a Python
  // float), rounded to fp32 when it multiplies the scores.
  const double base =
      query_pre_attn_scalar > 0.0 ? query_pre_attn_scalar : static_cast<double>(head_dim);
  return static_cast<float>(std::pow(base, -0.5));
}

absl::StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& json, std::string_view source) {
  ModelConfig config;
  KVSERVE_RETURN_IF_ERROR(ParseInto(json, std::string(source), config));
  return config;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = absl::StrCat(model_dir, "/config.json");
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open (no config.json)"));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  Json json;
  try {
    json = Json::parse(text.str());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
  return ParseModelConfig(json, path);
}

}  // namespace kvserve::engine
