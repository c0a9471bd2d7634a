// Rope fields of config.json: the precedence rules are in model_config.h; the
// families' quirks (Phi-3's top-level partial_rotary_factor and
// original_max_position_embeddings, Gemma 3's per-layer-type dicts) follow
// transformers 5.x's configuration classes.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/loader/model_config_internal.h"

namespace kvserve::engine::config_internal {
namespace {

// A list of numbers of exactly `size` elements (longrope factors).
absl::Status ReadFactors(const FieldReader& r, const std::string& key, int64_t size,
                         std::vector<double>& out) {
  const Json* v = r.Get(key);
  if (v == nullptr) return r.Missing(key);
  if (!v->is_array()) return r.Error(key, "must be a list of numbers");
  out.clear();
  for (const Json& x : *v) {
    if (!x.is_number()) return r.Error(key, "must be a list of numbers");
    const double d = x.get<double>();
    if (!(d > 0.0) || !std::isfinite(d)) {
      return r.Error(key, absl::StrCat("must hold positive numbers, got ", x.dump()));
    }
    out.push_back(d);
  }
  if (static_cast<int64_t>(out.size()) != size) {
    return r.Error(
        key, absl::StrCat("must have rotary_dim / 2 = ", size, " elements, got ", out.size()));
  }
  return absl::OkStatus();
}

// Phi-3 longrope (transformers _compute_longrope_parameters; Phi3Config gives
// its top-level original_max_position_embeddings, default 4096, priority over
// the dict's).
absl::Status ParseLongRope(const FieldReader& top, const FieldReader& r, ModelConfig& c) {
  RopeScaling& s = c.rope_scaling;
  s.type = RopeScaling::Type::kLongRope;
  std::optional<int64_t> original;
  KVSERVE_ASSIGN_OR_RETURN(original, top.OptionalInt("original_max_position_embeddings"));
  if (!original) {
    KVSERVE_ASSIGN_OR_RETURN(original, r.OptionalInt("original_max_position_embeddings"));
  }
  s.original_max_position_embeddings = original.value_or(4096);
  if (s.original_max_position_embeddings <= 0) {
    return top.Error("original_max_position_embeddings", "must be positive");
  }
  const int64_t half = c.RotaryDim() / 2;
  KVSERVE_RETURN_IF_ERROR(ReadFactors(r, "short_factor", half, s.short_factor));
  KVSERVE_RETURN_IF_ERROR(ReadFactors(r, "long_factor", half, s.long_factor));
  std::optional<double> factor;
  KVSERVE_ASSIGN_OR_RETURN(factor, r.OptionalDouble("factor"));
  s.factor = factor.value_or(static_cast<double>(c.max_position_embeddings) /
                             static_cast<double>(s.original_max_position_embeddings));
  std::optional<double> attention_factor;
  KVSERVE_ASSIGN_OR_RETURN(attention_factor, r.OptionalDouble("attention_factor"));
  if (attention_factor) {
    s.attention_factor = *attention_factor;
  } else if (s.factor <= 1.0) {
    s.attention_factor = 1.0;
  } else {
    s.attention_factor =
        std::sqrt(1.0 + std::log(s.factor) /
                            std::log(static_cast<double>(s.original_max_position_embeddings)));
  }
  if (!(s.attention_factor > 0.0) || !std::isfinite(s.attention_factor)) {
    return r.Error("attention_factor", "must be positive");
  }
  return absl::OkStatus();
}

// One rope dict (already chosen): its type and that type's fields.
absl::Status ParseRopeDict(const FieldReader& top, const FieldReader& r, const std::string& source,
                           const std::string& dict_name, bool phi3, ModelConfig& c) {
  std::optional<std::string> type;
  KVSERVE_ASSIGN_OR_RETURN(type, r.OptionalString("rope_type"));
  if (!type) {
    KVSERVE_ASSIGN_OR_RETURN(type, r.OptionalString("type"));
  }
  const std::string rope_type = type.value_or("default");

  RopeScaling& s = c.rope_scaling;
  if (rope_type == "default") {
    return absl::OkStatus();  // transformers ignores any factor here
  }
  if (phi3) {
    // Phi3Config.validate_rope: default or longrope ("su" is its old name).
    if (rope_type == "longrope" || rope_type == "su") return ParseLongRope(top, r, c);
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", dict_name, " type \"", rope_type,
                                                   "\" is not supported for phi3 (supported: "
                                                   "default, longrope, su)"));
  }
  if (rope_type == "linear") {
    s.type = RopeScaling::Type::kLinear;
    KVSERVE_ASSIGN_OR_RETURN(s.factor, r.RequiredDouble("factor"));
    return absl::OkStatus();
  }
  if (rope_type == "llama3") {
    s.type = RopeScaling::Type::kLlama3;
    KVSERVE_ASSIGN_OR_RETURN(s.factor, r.RequiredDouble("factor"));
    KVSERVE_ASSIGN_OR_RETURN(s.low_freq_factor, r.RequiredDouble("low_freq_factor"));
    KVSERVE_ASSIGN_OR_RETURN(s.high_freq_factor, r.RequiredDouble("high_freq_factor"));
    // transformers 5.x: the dict's value, else max_position_embeddings (a
    // top-level original_max_position_embeddings is ignored for these models).
    std::optional<int64_t> original;
    KVSERVE_ASSIGN_OR_RETURN(original, r.OptionalInt("original_max_position_embeddings"));
    s.original_max_position_embeddings = original.value_or(c.max_position_embeddings);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", dict_name, " type \"", rope_type,
                                                 "\" is not supported (supported: default, "
                                                 "linear, llama3)"));
}

}  // namespace

absl::Status ParseRope(const FieldReader& top, const std::string& source, ModelConfig& c) {
  const bool phi3 = c.model_type == "phi3";
  std::string dict_name;
  const Json* dict = nullptr;
  for (const char* name : {"rope_scaling", "rope_parameters"}) {
    const Json* v = top.Get(name);
    if (v == nullptr) continue;
    if (!v->is_object()) return top.Error(name, absl::StrCat("must be an object, got ", v->dump()));
    if (v->empty()) continue;  // transformers: `rope_scaling or rope_parameters`
    dict = v;
    dict_name = name;
    break;
  }
  KVSERVE_ASSIGN_OR_RETURN(c.rope_theta, top.Double("rope_theta", 10000.0));
  c.rope_scaling = RopeScaling{};
  c.partial_rotary_factor = 1.0;
  if (phi3) {
    KVSERVE_ASSIGN_OR_RETURN(c.partial_rotary_factor, top.Double("partial_rotary_factor", 1.0));
  }
  if (dict == nullptr) return absl::OkStatus();

  const std::string prefix = absl::StrCat(dict_name, ".");
  const FieldReader r(*dict, source, prefix);
  for (const char* layer_type : {"full_attention", "sliding_attention"}) {
    if (r.Get(layer_type) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": per-layer-type ", dict_name, " (\"",
                                                     layer_type, "\") is not supported"));
    }
  }
  KVSERVE_ASSIGN_OR_RETURN(c.rope_theta, r.Double("rope_theta", c.rope_theta));
  KVSERVE_ASSIGN_OR_RETURN(c.partial_rotary_factor,
                           r.Double("partial_rotary_factor", c.partial_rotary_factor));
  if (c.partial_rotary_factor != 1.0 && !phi3) {
    return r.Error("partial_rotary_factor", "other than 1.0 is not supported");
  }
  return ParseRopeDict(top, r, source, dict_name, phi3, c);
}

absl::Status ParseGemma3Rope(const FieldReader& top, const std::string& source, ModelConfig& c) {
  c.rope_scaling = RopeScaling{};
  c.partial_rotary_factor = 1.0;
  const Json* nested = top.Get("rope_parameters");
  if (nested != nullptr && !nested->is_object()) {
    return top.Error("rope_parameters", "must be an object");
  }
  const Json empty = Json::object();
  Json full = empty, sliding = empty;
  if (nested != nullptr) {
    for (const auto& [key, value] : nested->items()) {
      if (key != "full_attention" && key != "sliding_attention") {
        return top.Error("rope_parameters",
                         absl::StrCat("must be nested by layer type (full_attention, "
                                      "sliding_attention) for gemma3_text, got key \"",
                                      key, "\""));
      }
      if (value.is_null()) continue;
      if (!value.is_object()) return top.Error("rope_parameters." + key, "must be an object");
      (key == "full_attention" ? full : sliding) = value;
    }
  }
  // Gemma3TextConfig.convert_rope_params_to_dict: a legacy rope_scaling
  // updates the global (full attention) dict.
  if (const Json* scaling = top.Get("rope_scaling")) {
    if (!scaling->is_object()) return top.Error("rope_scaling", "must be an object");
    full.update(*scaling);
  }
  double global_theta = 1e6, local_theta = 1e4;
  KVSERVE_ASSIGN_OR_RETURN(global_theta, top.Double("rope_theta", 1e6));
  KVSERVE_ASSIGN_OR_RETURN(local_theta, top.Double("rope_local_base_freq", 1e4));

  const FieldReader fr(full, source, "rope_parameters.full_attention.");
  KVSERVE_ASSIGN_OR_RETURN(c.rope_theta, fr.Double("rope_theta", global_theta));
  KVSERVE_RETURN_IF_ERROR(
      ParseRopeDict(top, fr, source, "rope_parameters.full_attention", false, c));

  const FieldReader sr(sliding, source, "rope_parameters.sliding_attention.");
  KVSERVE_ASSIGN_OR_RETURN(c.local_rope_theta, sr.Double("rope_theta", local_theta));
  for (const FieldReader* r : {&fr, &sr}) {
    double partial = 1.0;
    KVSERVE_ASSIGN_OR_RETURN(partial, r->Double("partial_rotary_factor", 1.0));
    if (partial != 1.0) return r->Error("partial_rotary_factor", "other than 1.0 is not supported");
  }
  std::optional<std::string> local_type;
  KVSERVE_ASSIGN_OR_RETURN(local_type, sr.OptionalString("rope_type"));
  if (!local_type) {
    KVSERVE_ASSIGN_OR_RETURN(local_type, sr.OptionalString("type"));
  }
  if (local_type.value_or("default") != "default") {
    return sr.Error("rope_type", absl::StrCat("\"", *local_type,
                                              "\" is not supported for sliding layers (only "
                                              "\"default\")"));
  }
  if (!(c.local_rope_theta > 0.0) || !std::isfinite(c.local_rope_theta)) {
    return sr.Error("rope_theta", "must be positive");
  }
  return absl::OkStatus();
}

// Qwen2/Qwen3 (transformers Qwen2Config / Qwen3Config): layer i slides iff
// use_sliding_window, sliding_window is set and layer_types[i] ==
// "sliding_attention", where layer_types defaults to "sliding" for
// i >= max_window_layers.
absl::Status ParseQwenSlidingWindow(const FieldReader& r, const std::string& source,
                                    ModelConfig& c) {
  bool use_sliding_window = false;
  KVSERVE_ASSIGN_OR_RETURN(use_sliding_window, r.Bool("use_sliding_window", false));
  std::optional<int64_t> window;
  KVSERVE_ASSIGN_OR_RETURN(window, r.OptionalInt("sliding_window"));
  c.sliding_window = 0;
  if (!use_sliding_window || !window) return absl::OkStatus();

  int64_t sliding_layers = 0;
  if (const Json* types = r.Get("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c.num_layers) {
      return r.Error("layer_types", "must list one type per layer");
    }
    for (const Json& t : *types) {
      if (!t.is_string()) return r.Error("layer_types", "must list one type per layer");
      if (t.get<std::string>() == "sliding_attention") ++sliding_layers;
    }
  } else {
    int64_t max_window_layers = 28;
    KVSERVE_ASSIGN_OR_RETURN(max_window_layers, r.Int("max_window_layers", 28));
    sliding_layers = std::max<int64_t>(0, c.num_layers - std::max<int64_t>(0, max_window_layers));
  }
  if (sliding_layers == 0) return absl::OkStatus();
  if (sliding_layers != c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": use_sliding_window with ", sliding_layers, " of ", c.num_layers,
        " layers sliding (max_window_layers / layer_types) is not supported; kvserve needs all "
        "or none"));
  }
  c.sliding_window = *window;
  return absl::OkStatus();
}

}  // namespace kvserve::engine::config_internal
