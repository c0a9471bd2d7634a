// ModelWeights: a model's parameters in the form the CPU kernels run them:
// linear layers packed (kernels/cpu/gemm.h) in one WeightFormat (fp32, bf16,
// fp16 or int8: WeightOptions), the q/k/v and gate/up projections fused into
// one product each, norms and biases in fp32.
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
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/loader/model_config.h"
#include "engine/loader/safetensors.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/gemm.h"

namespace kvserve::engine {

// How the linear layers and the embedding table are stored (the server's
// --dtype and --quantization for the cpu backend; docs/engine.md).
enum class WeightDtype {
  kAuto,      // as the checkpoint stores each matrix: bf16 / fp16 stay 16-bit
  kFloat32,   // widened to fp32
  kBfloat16,  // bf16 (fp32 tensors rounded to nearest even)
  kFloat16,   // fp16 (likewise; an fp32 weight beyond +-65504 becomes inf)
};
enum class Quantization {
  kNone,
  // Weight-only int8: every linear layer (lm_head included) quantized at load,
  // symmetric, one scale per output channel. An untied embedding table keeps
  // the WeightDtype format; a tied one is the lm_head's int8 rows.
  kInt8,
  // W8A8: the same int8 weights (stored for int8 dot products), and each
  // linear layer's input quantized per token at run time (symmetric, one
  // scale per row); the products are exact integer sums (kernels/cpu/gemm_dot.h),
  // on AVX-512 VNNI where the CPU has it.
  kW8A8,
};
// How the linear layers multiply (the server's --matmul_precision, cpu).
enum class MatmulPrecision {
  kFloat32,  // fp32 FMAs on the stored weights widened exactly (the default)
  // bf16 dot products: every linear layer's weights stored as bf16 and its
  // input rounded to bf16 per element, multiplied by vdpbf16ps where the CPU
  // has AVX512-BF16 (fp32 accumulation; kernels/cpu/gemm_dot.h). An untied
  // embedding table keeps the WeightDtype format. Not with quantization.
  kBfloat16,
};
struct WeightOptions {
  WeightDtype dtype = WeightDtype::kAuto;
  Quantization quantization = Quantization::kNone;
  MatmulPrecision matmul_precision = MatmulPrecision::kFloat32;
};
// "auto", "float32", "bfloat16", "float16"; "none", "int8", "w8a8".
absl::StatusOr<WeightDtype> ParseWeightDtype(std::string_view name);
absl::StatusOr<Quantization> ParseQuantization(std::string_view name);
const char* WeightDtypeName(WeightDtype dtype);
const char* QuantizationName(Quantization quantization);
// "float32", "bfloat16".
absl::StatusOr<MatmulPrecision> ParseMatmulPrecision(std::string_view name);

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
  // [vocab, hidden], packed like a linear layer (the lookup reads its rows:
  // PackedMatrix::ReadRow); empty when tied: the table is lm_head's.
  kernels::PackedMatrix embed_tokens;
  std::vector<LayerWeights> layers;
  kernels::AlignedBuffer final_norm;  // [hidden]
  kernels::PackedMatrix lm_head;      // [vocab, hidden]

  const kernels::PackedMatrix& embedding() const {
    return embed_tokens.n > 0 ? embed_tokens : lm_head;
  }
  // Bytes a forward step reads from the weights for one token: every packed
  // matrix (the lm_head included) and the norms (benchmarks' roofline).
  int64_t StreamedBytesPerToken() const;
  // Bytes held (every matrix, the embedding table, norms and biases).
  int64_t TotalBytes() const;
};

// Reads and packs the weights named as transformers names them
// ("model.layers.N.self_attn.q_proj.weight", ...). Errors name the tensor.
absl::StatusOr<ModelWeights> LoadWeights(const ModelConfig& config,
                                         const SafetensorsCheckpoint& checkpoint,
                                         const WeightOptions& options = {});

}  // namespace kvserve::engine
