// GGUF metadata -> the config.json transformers' GGUF loader would write ->
// ModelConfig (see gguf.h for what is derived from the architecture).
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/loader/gguf.h"

namespace kvserve::engine {
namespace {

using nlohmann::json;

struct Family {
  const char* arch;  // general.architecture
  const char* model_type;
  const char* hf_class;
};
constexpr Family kFamilies[] = {
    {"llama", "llama", "LlamaForCausalLM"},    {"qwen2", "qwen2", "Qwen2ForCausalLM"},
    {"qwen3", "qwen3", "Qwen3ForCausalLM"},    {"phi3", "phi3", "Phi3ForCausalLM"},
    {"gemma2", "gemma2", "Gemma2ForCausalLM"}, {"gemma3", "gemma3_text", "Gemma3ForCausalLM"},
};

// Reads "<arch>.<suffix>" keys.
class ArchKeys {
 public:
  ArchKeys(const GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}
  std::string Key(std::string_view suffix) const {
    return absl::StrCat(arch_, ".", std::string(suffix));
  }
  bool Has(std::string_view suffix) const { return file_.Find(Key(suffix)) != nullptr; }
  absl::StatusOr<int64_t> Int(std::string_view suffix) const {
    KVSERVE_ASSIGN_OR_RETURN(uint64_t v, file_.GetUint(Key(suffix)));
    if (v > (uint64_t{1} << 40)) {
      return absl::InvalidArgumentError(absl::StrCat(file_.source(), ": GGUF metadata \"",
                                                     Key(suffix), "\" = ", v, " is too large"));
    }
    return static_cast<int64_t>(v);
  }
  absl::StatusOr<int64_t> Int(std::string_view suffix, int64_t fallback) const {
    return Has(suffix) ? Int(suffix) : absl::StatusOr<int64_t>(fallback);
  }
  absl::StatusOr<double> Float(std::string_view suffix, double fallback) const {
    if (!Has(suffix)) return fallback;
    KVSERVE_ASSIGN_OR_RETURN(double v, file_.GetFloat(Key(suffix)));
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_.source(), ": GGUF metadata \"", Key(suffix), "\" is not finite"));
    }
    return v;
  }

 private:
  const GgufFile& file_;
  std::string arch_;
};

absl::Status Unsupported(const GgufFile& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file.source(), ": ", what));
}

// Token ids the file names for BOS and the end of generation.
absl::Status AddTokenIds(const GgufFile& file, json& config) {
  if (file.Find("tokenizer.ggml.bos_token_id") != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(uint64_t bos, file.GetUint("tokenizer.ggml.bos_token_id"));
    config["bos_token_id"] = bos;
  }
  // llama.cpp stops at every end-of-generation token: EOS, EOT, EOM.
  json eos = json::array();
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    if (file.Find(key) == nullptr) continue;
    KVSERVE_ASSIGN_OR_RETURN(uint64_t id, file.GetUint(key));
    if (std::find(eos.begin(), eos.end(), json(id)) == eos.end()) eos.push_back(id);
  }
  if (!eos.empty()) config["eos_token_id"] = eos;
  return absl::OkStatus();
}

absl::Status AddRopeScaling(const GgufFile& file, const ArchKeys& keys, json& config) {
  std::string type = "none";
  if (keys.Has("rope.scaling.type")) {
    KVSERVE_ASSIGN_OR_RETURN(std::string_view t, file.GetString(keys.Key("rope.scaling.type")));
    type = std::string(t);
  }
  if (file.FindTensor("rope_freqs.weight") != nullptr) {
    return Unsupported(file,
                       "tensor \"rope_freqs.weight\" (llama3 rope frequencies) is not "
                       "supported in a GGUF");
  }
  if (file.FindTensor("rope_factors_long.weight") != nullptr) {
    return Unsupported(file,
                       "tensor \"rope_factors_long.weight\" (longrope) is not supported in "
                       "a GGUF");
  }
  if (type == "none") return absl::OkStatus();
  if (type != "linear") {
    return Unsupported(file, absl::StrCat("GGUF metadata \"", keys.Key("rope.scaling.type"),
                                          "\" = \"", type, "\" is not supported (none, linear)"));
  }
  KVSERVE_ASSIGN_OR_RETURN(double factor, keys.Float("rope.scaling.factor", 1.0));
  config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", factor}};
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<json> GgufConfigJson(const GgufFile& file) {
  KVSERVE_ASSIGN_OR_RETURN(std::string_view arch_name, file.GetString("general.architecture"));
  const Family* family = nullptr;
  for (const Family& f : kFamilies) {
    if (arch_name == f.arch) family = &f;
  }
  if (family == nullptr) {
    return Unsupported(file, absl::StrCat("GGUF architecture \"", std::string(arch_name),
                                          "\" is not supported (llama, qwen2, qwen3, phi3, "
                                          "gemma2, gemma3)"));
  }
  const std::string arch(arch_name);
  const ArchKeys keys(file, arch);
  json c = json::object();
  c["architectures"] = json::array({family->hf_class});
  c["model_type"] = family->model_type;
  KVSERVE_ASSIGN_OR_RETURN(int64_t hidden, keys.Int("embedding_length"));
  KVSERVE_ASSIGN_OR_RETURN(int64_t layers, keys.Int("block_count"));
  KVSERVE_ASSIGN_OR_RETURN(int64_t heads, keys.Int("attention.head_count"));
  KVSERVE_ASSIGN_OR_RETURN(int64_t kv_heads, keys.Int("attention.head_count_kv", heads));
  if (heads <= 0) return Unsupported(file, absl::StrCat(keys.Key("attention.head_count"), " is 0"));
  KVSERVE_ASSIGN_OR_RETURN(int64_t head_dim, keys.Int("attention.key_length", hidden / heads));
  KVSERVE_ASSIGN_OR_RETURN(int64_t value_dim, keys.Int("attention.value_length", head_dim));
  if (value_dim != head_dim) {
    return Unsupported(file,
                       absl::StrCat("GGUF metadata \"", keys.Key("attention.value_length"),
                                    "\" = ", value_dim, " differs from key_length ", head_dim));
  }
  c["hidden_size"] = hidden;
  KVSERVE_ASSIGN_OR_RETURN(c["intermediate_size"], keys.Int("feed_forward_length"));
  c["num_hidden_layers"] = layers;
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = kv_heads;
  c["head_dim"] = head_dim;
  KVSERVE_ASSIGN_OR_RETURN(c["max_position_embeddings"], keys.Int("context_length"));
  KVSERVE_ASSIGN_OR_RETURN(c["rms_norm_eps"], keys.Float("attention.layer_norm_rms_epsilon", 1e-6));
  KVSERVE_ASSIGN_OR_RETURN(c["rope_theta"], keys.Float("rope.freq_base", 10000.0));
  KVSERVE_RETURN_IF_ERROR(AddRopeScaling(file, keys, c));

  const GgufTensor* embed = file.FindTensor("token_embd.weight");
  if (embed == nullptr || embed->ne.size() != 2) {
    return Unsupported(file, "tensor \"token_embd.weight\" is missing or not a matrix");
  }
  int64_t vocab = embed->ne[1];
  if (keys.Has("vocab_size")) {
    KVSERVE_ASSIGN_OR_RETURN(vocab, keys.Int("vocab_size"));
  }
  c["vocab_size"] = vocab;
  c["tie_word_embeddings"] = file.FindTensor("output.weight") == nullptr;
  c["attention_bias"] = file.FindTensor("blk.0.attn_output.bias") != nullptr;
  if (family->model_type != std::string("qwen2") &&
      (file.FindTensor("blk.0.attn_q.bias") != nullptr) !=
          (file.FindTensor("blk.0.attn_output.bias") != nullptr)) {
    return Unsupported(file,
                       "q/k/v biases without an output bias (or the reverse) are only "
                       "supported for qwen2");
  }
  KVSERVE_RETURN_IF_ERROR(AddTokenIds(file, c));

  KVSERVE_ASSIGN_OR_RETURN(int64_t window, keys.Int("attention.sliding_window", 0));
  if (family->model_type == std::string("phi3")) {
    KVSERVE_ASSIGN_OR_RETURN(int64_t rotary, keys.Int("rope.dimension_count", head_dim));
    c["partial_rotary_factor"] = static_cast<double>(rotary) / static_cast<double>(head_dim);
    if (window > 0) c["sliding_window"] = window;
  } else if (keys.Has("rope.dimension_count")) {
    KVSERVE_ASSIGN_OR_RETURN(int64_t rotary, keys.Int("rope.dimension_count"));
    if (rotary != head_dim) {
      return Unsupported(
          file, absl::StrCat("GGUF metadata \"", keys.Key("rope.dimension_count"), "\" = ", rotary,
                             " (partial rotary) is only supported "
                             "for phi3"));
    }
  }
  if (arch == "qwen2" || arch == "qwen3" || arch == "llama") {
    if (window > 0) {
      return Unsupported(file,
                         absl::StrCat("GGUF metadata \"", keys.Key("attention.sliding_window"),
                                      "\" is not supported for ", arch));
    }
  }
  if (arch == "gemma2" || arch == "gemma3") {
    c["hidden_activation"] = "gelu_pytorch_tanh";
    // The file does not store query_pre_attn_scalar; llama.cpp scales by
    // key_length^-0.5 except for the 27B models (46 layers of Gemma 2, 62 of
    // Gemma 3), whose configs say hidden_size / num_heads.
    const bool is_27b = (arch == "gemma2" && layers == 46) || (arch == "gemma3" && layers == 62);
    c["query_pre_attn_scalar"] = is_27b ? hidden / heads : head_dim;
    c["sliding_window"] = window > 0 ? json(window) : json(nullptr);
    KVSERVE_ASSIGN_OR_RETURN(double attn_cap, keys.Float("attn_logit_softcapping", 0.0));
    KVSERVE_ASSIGN_OR_RETURN(double final_cap, keys.Float("final_logit_softcapping", 0.0));
    c["attn_logit_softcapping"] = attn_cap > 0 ? json(attn_cap) : json(nullptr);
    c["final_logit_softcapping"] = final_cap > 0 ? json(final_cap) : json(nullptr);
    if (arch == "gemma3") {
      c["sliding_window_pattern"] = 6;
      c["rope_local_base_freq"] = 10000.0;
    }
  }
  return c;
}

absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file) {
  KVSERVE_ASSIGN_OR_RETURN(json config, GgufConfigJson(file));
  return ParseModelConfig(config, file.source());
}

}  // namespace kvserve::engine
