// ModelConfig: the decoder-only architecture parameters kvserve understands,
// read from a Hugging Face config.json: the Llama family (Llama 2/3, Mistral,
// Qwen2), Qwen3, Phi-3 (Phi-3/3.5/4-mini) and Gemma 2 / Gemma 3 (text). The
// families differ only in the optional features below (q/k norms, sandwich
// norms, GeGLU, soft-capping, per-layer sliding windows, partial and longrope
// rotary); one loader and one runner serve them all.
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
// the default theta is 10000. Rope types: "default", "linear", "llama3", and
// for Phi-3 "longrope" (legacy "su"). Gemma 3 nests rope_parameters by layer
// type ("full_attention" / "sliding_attention", model_config_families.cc).
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
  enum class Type { kNone, kLinear, kLlama3, kLongRope };
  Type type = Type::kNone;
  double factor = 1.0;
  // llama3 only:
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 and longrope:
  int64_t original_max_position_embeddings = 8192;
  // longrope only: per-frequency divisors [rotary_dim / 2], and the factor
  // that multiplies cos and sin ("attention_factor", else
  // sqrt(1 + ln(s) / ln(original)) with s = max_position_embeddings /
  // original when s > 1, else 1; transformers' _compute_longrope_parameters).
  std::vector<double> short_factor;
  std::vector<double> long_factor;
  double attention_factor = 1.0;
};

enum class Activation { kSilu, kGeluTanh };  // "silu", "gelu_pytorch_tanh"

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::string model_type;    // llama mistral qwen2 qwen3 phi3 gemma2 gemma3_text
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
  bool qkv_bias = false;     // Qwen2 always; Llama, Qwen3, Gemma "attention_bias"
  bool o_proj_bias = false;  // Llama, Qwen3, Gemma "attention_bias"; never Qwen2
  // 0: none. Mistral, Phi-3: "sliding_window" when non-null, every layer.
  // Qwen2/Qwen3: only with "use_sliding_window": true, and only when every
  // layer slides (a per-layer mix through "max_window_layers" /
  // "layer_types" is rejected). Gemma: the layers sliding_layers marks.
  int64_t sliding_window = 0;
  // Empty: every layer uses sliding_window. Otherwise one flag per layer
  // (Gemma's "layer_types"): only flagged layers use the window.
  std::vector<bool> sliding_layers;

  // ---- Features beyond the Llama family (all off for Llama/Mistral/Qwen2) ----
  Activation hidden_act = Activation::kSilu;  // MLP: act(gate) * up
  // Rotary on the first RotaryDim() = int(head_dim * partial_rotary_factor)
  // dims of each head (Phi-3 "partial_rotary_factor"; Phi-4-mini 0.75).
  double partial_rotary_factor = 1.0;
  // Qwen3, Gemma 3: RMSNorm over each q and k head (weights [head_dim]),
  // after the projection and before RoPE.
  bool qk_norm = false;
  // Gemma: every RMSNorm multiplies by (1 + w) instead of w (the loader adds
  // the 1 to the fp32 weights, as transformers does in fp32).
  bool norm_weight_plus_one = false;
  // Gemma: the attention and MLP outputs are normed before the residual add
  // (post_attention_layernorm, post_feedforward_layernorm), and the MLP input
  // norm is pre_feedforward_layernorm.
  bool sandwich_norms = false;
  // Gemma: embeddings multiplied by fp32(sqrt(hidden_size)).
  bool scale_embeddings = false;
  // Attention scores are query_pre_attn_scalar^-0.5 * q.k (Gemma); 0 means
  // head_dim^-0.5.
  double query_pre_attn_scalar = 0.0;
  // 0: none. Else x -> cap * tanh(x / cap) on attention scores (after the
  // scale, before the softmax) and on the final logits (Gemma 2).
  double attn_logit_softcapping = 0.0;
  double final_logit_softcapping = 0.0;
  // Gemma 3: sliding layers use default rope with this theta
  // ("rope_local_base_freq", or rope_parameters.sliding_attention.rope_theta);
  // 0: every layer uses rope_theta / rope_scaling.
  double local_rope_theta = 0.0;
  int32_t bos_token_id = -1;  // -1: none
  std::vector<int32_t> eos_token_ids;

  // Checks internal consistency (positive sizes, heads divide, even head_dim,
  // token ids inside the vocabulary, sane rope parameters). ParseModelConfig
  // calls it; call it again after editing a config by hand.
  absl::Status Validate() const;

  int64_t RotaryDim() const {
    return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
  }
  bool LayerSlides(int64_t layer) const {
    return sliding_window > 0 && (sliding_layers.empty() || sliding_layers[layer]);
  }
  // The attention window of `layer` (0: unlimited).
  int64_t LayerSlidingWindow(int64_t layer) const {
    return LayerSlides(layer) ? sliding_window : 0;
  }
  // Whether `layer` uses the local rope (Gemma 3 sliding layers).
  bool LayerUsesLocalRope(int64_t layer) const {
    return local_rope_theta > 0.0 && !sliding_layers.empty() && sliding_layers[layer];
  }
  // The score scale as transformers computes it (a Python float, then fp32).
  float AttentionScale() const;
};

// `source` names the file in error messages. Returns a validated config.
absl::StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& json, std::string_view source);
// Reads <dir>/config.json (NotFound when it is absent).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

// Rotary inverse frequencies [RotaryDim() / 2], as transformers computes them
// (fp32, including linear, llama3 and longrope scaling), step by step in the
// same fp32 operations. The one difference: theta^(2i/d) is rounded correctly
// here while torch's vectorised powf may be 1 ulp off, so an element can
// differ from transformers' by 1 ulp (1 of the 200 values the unit test
// checks does).
//
// longrope: transformers picks long_factor for a forward pass whose longest
// position exceeds original_max_position_embeddings and short_factor
// otherwise, which changes the keys already in a KV cache when a sequence
// crosses that length. kvserve picks once per served maximum length (as
// vLLM does): long_factor iff max_model_len > original_max_position_embeddings
// (max_model_len <= 0 means max_position_embeddings), so every key in the
// cache was rotated with the same frequencies. For sequences that never pass
// original_max_position_embeddings served with max_model_len <= it, and for
// sequences that already start past it, this equals transformers exactly.
std::vector<float> ComputeRopeInvFreq(const ModelConfig& config, int64_t max_model_len = 0);
// Gemma 3 sliding layers: default rope with local_rope_theta over RotaryDim().
// Empty when config.local_rope_theta == 0.
std::vector<float> ComputeLocalRopeInvFreq(const ModelConfig& config);
// The fp32 factor on cos and sin (longrope's attention_factor; else 1).
float RopeAttentionScaling(const ModelConfig& config);

}  // namespace kvserve::engine
