// ModelConfig: the Llama-family architecture parameters kvserve understands,
// read from a Hugging Face config.json (Llama 2/3, Mistral, Qwen2).
// Anything outside that family, or a field value kvserve cannot honour
// (another activation, MLP bias, ...), is an InvalidArgument naming the file
// and the field.
//
// Both config.json dialects are read:
//   transformers 4.x: top-level "rope_theta" and "rope_scaling"
//     {"rope_type" (or legacy "type"), "factor", "low_freq_factor", ...};
//   transformers 5.x: "rope_parameters" {"rope_type", "rope_theta", ...}.
// Precedence follows transformers 5.x: a non-empty "rope_scaling" wins over
// "rope_parameters"; "rope_theta" inside the dict wins over the top-level one;
// the default theta is 10000. Rope types: "default", "linear", "llama3".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace kvserve::engine {

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  // llama3 only:
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::string model_type;    // "llama" | "mistral" | "qwen2"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // == num_heads (MHA), < (GQA), 1 (MQA)
  int64_t head_dim = 0;      // config "head_dim", else hidden_size / num_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;     // Qwen2 always; Llama "attention_bias"
  bool o_proj_bias = false;  // Llama "attention_bias" (also biases o_proj); never Qwen2
  // 0: none. Mistral: "sliding_window" when non-null. Qwen2: only with
  // "use_sliding_window": true, and only when every layer slides (a per-layer
  // mix through "max_window_layers" / "layer_types" is rejected).
  int64_t sliding_window = 0;
  int32_t bos_token_id = -1;  // -1: none
  std::vector<int32_t> eos_token_ids;

  // Checks internal consistency (positive sizes, heads divide, even head_dim,
  // token ids inside the vocabulary, sane rope parameters). ParseModelConfig
  // calls it; call it again after editing a config by hand.
  absl::Status Validate() const;
};

// `source` names the file in error messages. Returns a validated config.
absl::StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& json, std::string_view source);
// Reads <dir>/config.json (NotFound when it is absent).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

// Rotary inverse frequencies [head_dim / 2], as transformers computes them
// (fp32, including linear and llama3 scaling), step by step in the same fp32
// operations. The one difference: theta^(2i/d) is rounded correctly here while
// torch's vectorised powf may be 1 ulp off, so an element can differ from
// transformers' by 1 ulp (1 of the 200 values the unit test checks does).
std::vector<float> ComputeRopeInvFreq(const ModelConfig& config);

}  // namespace kvserve::engine
