// Parsing of Hugging Face config.json into ModelConfig. Every accessor checks
// the JSON type before reading, so nlohmann never throws out of here; the only
// exception caught is the parse error of LoadModelConfig.
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
#include "engine/loader/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvserve::engine {
namespace {

using Json = nlohmann::json;

// One supported family: its config "model_type" and its causal-LM class.
struct Family {
  const char* model_type;
  const char* architecture;
};
constexpr Family kFamilies[] = {
    {"llama", "LlamaForCausalLM"},
    {"mistral", "MistralForCausalLM"},
    {"qwen2", "Qwen2ForCausalLM"},
};
constexpr char kSupportedArchitectures[] = "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM";

// Reads fields of one JSON object; `prefix` names the object in messages
// ("" for the top level, "rope_scaling." for a nested dict).
class FieldReader {
 public:
  FieldReader(const Json& object, const std::string& source, const std::string& prefix)
      : object_(object), source_(source), prefix_(prefix) {}

  // nullptr when the field is absent or JSON null (transformers treats both as
  // "use the default").
  const Json* Get(const std::string& key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  absl::Status Error(const std::string& key, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": field \"", prefix_, key, "\" ", what));
  }
  absl::Status Missing(const std::string& key) const { return Error(key, "missing"); }

  absl::StatusOr<std::optional<int64_t>> OptionalInt(const std::string& key) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(key, "is out of range");
      }
      return static_cast<int64_t>(u);
    }
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_float()) {
      // Some writers emit 4096.0; accept a float only when it is an integer.
      const double d = v->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 0x1p62) {
        return static_cast<int64_t>(d);
      }
    }
    return Error(key, absl::StrCat("must be an integer, got ", v->dump()));
  }

  absl::StatusOr<int64_t> RequiredInt(const std::string& key) const {
    absl::StatusOr<std::optional<int64_t>> v = OptionalInt(key);
    if (!v.ok()) return v.status();
    if (!v->has_value()) return Missing(key);
    return **v;
  }

  absl::StatusOr<int64_t> Int(const std::string& key, int64_t default_value) const {
    absl::StatusOr<std::optional<int64_t>> v = OptionalInt(key);
    if (!v.ok()) return v.status();
    return v->value_or(default_value);
  }

  absl::StatusOr<std::optional<double>> OptionalDouble(const std::string& key) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) return Error(key, absl::StrCat("must be a number, got ", v->dump()));
    return v->get<double>();
  }

  absl::StatusOr<double> Double(const std::string& key, double default_value) const {
    absl::StatusOr<std::optional<double>> v = OptionalDouble(key);
    if (!v.ok()) return v.status();
    return v->value_or(default_value);
  }

  absl::StatusOr<double> RequiredDouble(const std::string& key) const {
    absl::StatusOr<std::optional<double>> v = OptionalDouble(key);
    if (!v.ok()) return v.status();
    if (!v->has_value()) return Missing(key);
    return **v;
  }

  absl::StatusOr<bool> Bool(const std::string& key, bool default_value) const {
    const Json* v = Get(key);
    if (v == nullptr) return default_value;
    if (!v->is_boolean()) return Error(key, absl::StrCat("must be true or false, got ", v->dump()));
    return v->get<bool>();
  }

  absl::StatusOr<std::optional<std::string>> OptionalString(const std::string& key) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) return Error(key, absl::StrCat("must be a string, got ", v->dump()));
    return v->get<std::string>();
  }

  // A token id: an integer that fits int32 (range against the vocabulary is
  // Validate's job).
  absl::StatusOr<int32_t> TokenId(const std::string& key, const Json& v) const {
    if (!v.is_number_integer()) {
      return Error(key, absl::StrCat("must be a token id or a list of them, got ", v.dump()));
    }
    if (v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX
                               : (v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)) {
      return Error(key, absl::StrCat("token id ", v.dump(), " is out of range"));
    }
    return static_cast<int32_t>(v.get<int64_t>());
  }

 private:
  const Json& object_;
  std::string source_;
  std::string prefix_;
};

absl::Status ResolveFamily(const FieldReader& r, const std::string& source, ModelConfig& c) {
  std::optional<std::string> model_type;
  LOADER_ASSIGN_OR_RETURN(model_type, r.OptionalString("model_type"));
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
                                                   "\" (supported: llama, mistral, qwen2)"));
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

// Rope: see the precedence rules in model_config.h.
absl::Status ParseRope(const FieldReader& top, const std::string& source, ModelConfig& c) {
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
  LOADER_ASSIGN_OR_RETURN(c.rope_theta, top.Double("rope_theta", 10000.0));
  c.rope_scaling = RopeScaling{};
  if (dict == nullptr) return absl::OkStatus();

  const std::string prefix = absl::StrCat(dict_name, ".");
  const FieldReader r(*dict, source, prefix);
  for (const char* layer_type : {"full_attention", "sliding_attention"}) {
    if (r.Get(layer_type) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": per-layer-type ", dict_name, " (\"",
                                                     layer_type, "\") is not supported"));
    }
  }
  LOADER_ASSIGN_OR_RETURN(c.rope_theta, r.Double("rope_theta", c.rope_theta));
  double partial_rotary_factor = 1.0;
  LOADER_ASSIGN_OR_RETURN(partial_rotary_factor, r.Double("partial_rotary_factor", 1.0));
  if (partial_rotary_factor != 1.0) {
    return r.Error("partial_rotary_factor", "other than 1.0 is not supported");
  }

  std::optional<std::string> type;
  LOADER_ASSIGN_OR_RETURN(type, r.OptionalString("rope_type"));
  if (!type) {
    LOADER_ASSIGN_OR_RETURN(type, r.OptionalString("type"));
  }
  const std::string rope_type = type.value_or("default");

  RopeScaling& s = c.rope_scaling;
  if (rope_type == "default") {
    return absl::OkStatus();  // transformers ignores any factor here
  }
  if (rope_type == "linear") {
    s.type = RopeScaling::Type::kLinear;
    LOADER_ASSIGN_OR_RETURN(s.factor, r.RequiredDouble("factor"));
    return absl::OkStatus();
  }
  if (rope_type == "llama3") {
    s.type = RopeScaling::Type::kLlama3;
    LOADER_ASSIGN_OR_RETURN(s.factor, r.RequiredDouble("factor"));
    LOADER_ASSIGN_OR_RETURN(s.low_freq_factor, r.RequiredDouble("low_freq_factor"));
    LOADER_ASSIGN_OR_RETURN(s.high_freq_factor, r.RequiredDouble("high_freq_factor"));
    // transformers 5.x: the dict's value, else max_position_embeddings (a
    // top-level original_max_position_embeddings is ignored for these models).
    std::optional<int64_t> original;
    LOADER_ASSIGN_OR_RETURN(original, r.OptionalInt("original_max_position_embeddings"));
    s.original_max_position_embeddings = original.value_or(c.max_position_embeddings);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", dict_name, " type \"", rope_type,
                                                 "\" is not supported (supported: default, "
                                                 "linear, llama3)"));
}

// Qwen2 (transformers Qwen2Config): layer i slides iff use_sliding_window,
// sliding_window is set and layer_types[i] == "sliding_attention", where
// layer_types defaults to "sliding" for i >= max_window_layers.
absl::Status ParseQwen2SlidingWindow(const FieldReader& r, const std::string& source,
                                     ModelConfig& c) {
  bool use_sliding_window = false;
  LOADER_ASSIGN_OR_RETURN(use_sliding_window, r.Bool("use_sliding_window", false));
  std::optional<int64_t> window;
  LOADER_ASSIGN_OR_RETURN(window, r.OptionalInt("sliding_window"));
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
    LOADER_ASSIGN_OR_RETURN(max_window_layers, r.Int("max_window_layers", 28));
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

absl::Status ParseTokenIds(const FieldReader& r, ModelConfig& c) {
  c.bos_token_id = -1;
  if (const Json* bos = r.Get("bos_token_id")) {
    LOADER_ASSIGN_OR_RETURN(c.bos_token_id, r.TokenId("bos_token_id", *bos));
  }
  c.eos_token_ids.clear();
  if (const Json* eos = r.Get("eos_token_id")) {
    if (eos->is_array()) {
      for (const Json& id : *eos) {
        int32_t value = 0;
        LOADER_ASSIGN_OR_RETURN(value, r.TokenId("eos_token_id", id));
        c.eos_token_ids.push_back(value);
      }
    } else {
      int32_t value = 0;
      LOADER_ASSIGN_OR_RETURN(value, r.TokenId("eos_token_id", *eos));
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
  LOADER_RETURN_IF_ERROR(ResolveFamily(r, source, c));

  std::optional<std::string> act;
  LOADER_ASSIGN_OR_RETURN(act, r.OptionalString("hidden_act"));
  if (act && *act != "silu") {
    return r.Error("hidden_act", absl::StrCat("\"", *act, "\" is not supported (only \"silu\")"));
  }

  LOADER_ASSIGN_OR_RETURN(c.vocab_size, r.RequiredInt("vocab_size"));
  LOADER_ASSIGN_OR_RETURN(c.hidden_size, r.RequiredInt("hidden_size"));
  LOADER_ASSIGN_OR_RETURN(c.intermediate_size, r.RequiredInt("intermediate_size"));
  LOADER_ASSIGN_OR_RETURN(c.num_layers, r.RequiredInt("num_hidden_layers"));
  LOADER_ASSIGN_OR_RETURN(c.num_heads, r.RequiredInt("num_attention_heads"));
  LOADER_ASSIGN_OR_RETURN(c.num_kv_heads, r.Int("num_key_value_heads", c.num_heads));
  LOADER_ASSIGN_OR_RETURN(c.max_position_embeddings, r.RequiredInt("max_position_embeddings"));
  LOADER_ASSIGN_OR_RETURN(c.rms_norm_eps, r.Double("rms_norm_eps", 1e-6));
  LOADER_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));

  std::optional<int64_t> head_dim;
  LOADER_ASSIGN_OR_RETURN(head_dim, r.OptionalInt("head_dim"));
  if (head_dim) {
    c.head_dim = *head_dim;
  } else if (c.num_heads > 0 && c.hidden_size % c.num_heads == 0) {
    c.head_dim = c.hidden_size / c.num_heads;
  } else {
    return r.Error("head_dim",
                   absl::StrCat("missing and hidden_size ", c.hidden_size,
                                " is not a multiple of num_attention_heads ", c.num_heads));
  }

  LOADER_RETURN_IF_ERROR(ParseRope(r, source, c));

  // Biases and sliding windows differ per family (transformers' modeling code).
  c.qkv_bias = c.o_proj_bias = false;
  c.sliding_window = 0;
  if (c.model_type == "llama") {
    bool attention_bias = false;
    LOADER_ASSIGN_OR_RETURN(attention_bias, r.Bool("attention_bias", false));
    c.qkv_bias = c.o_proj_bias = attention_bias;
    bool mlp_bias = false;
    LOADER_ASSIGN_OR_RETURN(mlp_bias, r.Bool("mlp_bias", false));
    if (mlp_bias) return r.Error("mlp_bias", "true is not supported");
  } else if (c.model_type == "mistral") {
    std::optional<int64_t> window;
    LOADER_ASSIGN_OR_RETURN(window, r.OptionalInt("sliding_window"));
    c.sliding_window = window.value_or(0);
  } else if (c.model_type == "qwen2") {
    c.qkv_bias = true;  // Qwen2Attention: q/k/v always biased, o_proj never
    LOADER_RETURN_IF_ERROR(ParseQwen2SlidingWindow(r, source, c));
  }

  LOADER_RETURN_IF_ERROR(ParseTokenIds(r, c));
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
  const RopeScaling& s = rope_scaling;
  if (s.type != RopeScaling::Type::kNone && (!(s.factor > 0.0) || !std::isfinite(s.factor))) {
    return fail("rope factor must be positive, got ", s.factor);
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

absl::StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& json, std::string_view source) {
  ModelConfig config;
  if (absl::Status s = ParseInto(json, std::string(source), config); !s.ok()) return s;
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
