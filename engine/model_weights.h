// ModelWeights: a model's parameters in the form the CPU kernels run them:
// fp32, linear layers packed (kernels/cpu/gemm.h), and the q/k/v and gate/up
// projections fused into one product each.
//
//   qkv:     rows [0, H*D) = q_proj, [H*D, (H+KV)*D) = k_proj, then v_proj
//   gate_up: rows [0, I) = gate_proj, [I, 2I) = up_proj
//
// Fusing changes no result: each output column is its own dot product.
// Phi-3 checkpoints hold these already fused (self_attn.qkv_proj,
// mlp.gate_up_proj) in the same row order, and are read as one tensor each.
//
// RMSNorm weights are stored as the kernel multiplies them: for Gemma
// (config.norm_weight_plus_one) the loader adds 1 to each fp32 weight, which
// is exactly transformers' fp32 `1.0 + weight.float()`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/loader/model_config.h"
#include "engine/loader/safetensors.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/gemm.h"

namespace kvserve::engine {

struct LayerWeights {
  kernels::AlignedBuffer input_norm;  // [hidden]
  kernels::PackedMatrix qkv;          // [(H + 2 KV) * D, hidden]
  std::vector<float> qkv_bias;        // empty, or [(H + 2 KV) * D]
  kernels::AlignedBuffer q_norm;      // empty, or [D] (config.qk_norm)
  kernels::AlignedBuffer k_norm;      // empty, or [D]
  kernels::PackedMatrix o_proj;       // [hidden, H * D]
  std::vector<float> o_proj_bias;     // empty, or [hidden] (attention_bias)
  // Empty, or [hidden] (config.sandwich_norms): Gemma's post_attention_layernorm.
  kernels::AlignedBuffer attn_output_norm;
  // [hidden]: the MLP's input norm (Llama post_attention_layernorm, Gemma
  // pre_feedforward_layernorm).
  kernels::AlignedBuffer mlp_input_norm;
  kernels::PackedMatrix gate_up;  // [2 I, hidden]
  kernels::PackedMatrix down;     // [hidden, I]
  // Empty, or [hidden] (config.sandwich_norms): post_feedforward_layernorm.
  kernels::AlignedBuffer mlp_output_norm;
};

struct ModelWeights {
  kernels::AlignedBuffer embed_tokens;  // [vocab, hidden], row-major
  std::vector<LayerWeights> layers;
  kernels::AlignedBuffer final_norm;  // [hidden]
  kernels::PackedMatrix lm_head;      // [vocab, hidden] (a packed copy when tied)

  // Bytes a forward step reads from the weights for one token: every packed
  // matrix (the lm_head included) and the norms (benchmarks' roofline).
  int64_t StreamedBytesPerToken() const;
};

// Reads and packs the weights named as transformers names them
// ("model.layers.N.self_attn.q_proj.weight", ...). Errors name the tensor.
absl::StatusOr<ModelWeights> LoadWeights(const ModelConfig& config,
                                         const SafetensorsCheckpoint& checkpoint);

}  // namespace kvserve::engine
