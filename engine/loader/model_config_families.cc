// Family-specific config.json fields of Qwen3, Phi-3 and Gemma 2 / 3, as
// transformers 5.x's configuration and modeling classes read them. Defaults
// are those classes' defaults (they apply when a field is absent; Gemma's
// soft-capping and sliding_window also distinguish an explicit null).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/loader/model_config_internal.h"

namespace kvserve::engine::config_internal {
namespace {

// A field whose absent default differs from its explicit null (None): 0.
absl::StatusOr<double> NullableDouble(const FieldReader& r, const std::string& key,
                                      double absent_default) {
  if (r.IsExplicitNull(key)) return 0.0;
  std::optional<double> v;
  KVSERVE_ASSIGN_OR_RETURN(v, r.OptionalDouble(key));
  if (!v) return absent_default;
  if (!(*v > 0.0) || !std::isfinite(*v)) {
    return r.Error(key, absl::StrCat("must be positive or null, got ", *v));
  }
  return *v;
}

absl::Status ParseAttentionBias(const FieldReader& r, ModelConfig& c) {
  bool attention_bias = false;
  KVSERVE_ASSIGN_OR_RETURN(attention_bias, r.Bool("attention_bias", false));
  c.qkv_bias = c.o_proj_bias = attention_bias;
  return absl::OkStatus();
}

// Gemma's layer_types, or its default pattern: layer i slides iff
// (i + 1) % pattern != 0 (Gemma 2: pattern 2; Gemma 3: sliding_window_pattern,
// default 6).
absl::Status ParseGemmaLayerTypes(const FieldReader& r, ModelConfig& c) {
  c.sliding_layers.assign(static_cast<size_t>(std::max<int64_t>(c.num_layers, 0)), false);
  if (const Json* types = r.Get("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c.num_layers) {
      return r.Error("layer_types",
                     absl::StrCat("must list one type per layer (", c.num_layers, ")"));
    }
    for (size_t i = 0; i < types->size(); ++i) {
      const Json& t = (*types)[i];
      const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
      if (name != "sliding_attention" && name != "full_attention") {
        return r.Error("layer_types", absl::StrCat("entry ", i, " \"", name,
                                                   "\" is not supported (sliding_attention, "
                                                   "full_attention)"));
      }
      c.sliding_layers[i] = name == "sliding_attention";
    }
    return absl::OkStatus();
  }
  int64_t pattern = 2;
  if (c.model_type == "gemma3_text") {
    KVSERVE_ASSIGN_OR_RETURN(pattern, r.Int("sliding_window_pattern", 6));
    if (pattern <= 0) return r.Error("sliding_window_pattern", "must be positive");
  }
  for (int64_t i = 0; i < c.num_layers; ++i) c.sliding_layers[i] = (i + 1) % pattern != 0;
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseQwen3(const FieldReader& r, const std::string& source, ModelConfig& c) {
  KVSERVE_RETURN_IF_ERROR(ParseAttentionBias(r, c));
  c.qk_norm = true;  // Qwen3Attention: q_norm / k_norm over head_dim, always
  return ParseQwenSlidingWindow(r, source, c);
}

absl::Status ParsePhi3(const FieldReader& r, const std::string& source, ModelConfig& c) {
  // Phi3Attention / Phi3MLP: no biases; a window (when set) on every layer.
  std::optional<int64_t> window;
  KVSERVE_ASSIGN_OR_RETURN(window, r.OptionalInt("sliding_window"));
  c.sliding_window = window.value_or(0);
  return absl::OkStatus();
}

absl::Status ParseGemma(const FieldReader& r, const std::string& source, ModelConfig& c) {
  const bool gemma3 = c.model_type == "gemma3_text";
  // Gemma2MLP / Gemma3MLP read hidden_activation (hidden_act is ignored).
  std::optional<std::string> act;
  KVSERVE_ASSIGN_OR_RETURN(act, r.OptionalString("hidden_activation"));
  if (act && *act != "gelu_pytorch_tanh") {
    return r.Error("hidden_activation",
                   absl::StrCat("\"", *act, "\" is not supported (only \"gelu_pytorch_tanh\")"));
  }
  c.hidden_act = Activation::kGeluTanh;
  bool bidirectional = false;
  KVSERVE_ASSIGN_OR_RETURN(bidirectional, r.Bool("use_bidirectional_attention", false));
  if (bidirectional) return r.Error("use_bidirectional_attention", "true is not supported");

  KVSERVE_RETURN_IF_ERROR(ParseAttentionBias(r, c));
  KVSERVE_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", true));
  c.norm_weight_plus_one = true;
  c.sandwich_norms = true;
  c.scale_embeddings = true;
  c.qk_norm = gemma3;
  KVSERVE_ASSIGN_OR_RETURN(c.query_pre_attn_scalar, r.Double("query_pre_attn_scalar", 256.0));
  if (!(c.query_pre_attn_scalar > 0.0) || !std::isfinite(c.query_pre_attn_scalar)) {
    return r.Error("query_pre_attn_scalar", "must be positive");
  }
  KVSERVE_ASSIGN_OR_RETURN(c.attn_logit_softcapping,
                           NullableDouble(r, "attn_logit_softcapping", gemma3 ? 0.0 : 50.0));
  KVSERVE_ASSIGN_OR_RETURN(c.final_logit_softcapping,
                           NullableDouble(r, "final_logit_softcapping", gemma3 ? 0.0 : 30.0));
  if (r.IsExplicitNull("sliding_window")) {
    c.sliding_window = 0;
  } else {
    KVSERVE_ASSIGN_OR_RETURN(c.sliding_window, r.Int("sliding_window", 4096));
  }
  KVSERVE_RETURN_IF_ERROR(ParseGemmaLayerTypes(r, c));
  if (gemma3) return ParseGemma3Rope(r, source, c);
  return ParseRope(r, source, c);
}

}  // namespace kvserve::engine::config_internal
