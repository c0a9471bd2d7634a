// Row-wise kernels of a Llama-family layer on the GPU (the CUDA twins of
// kernels/cpu/elementwise.h). Arithmetic in fp32; storage as the ElemType
// says. The residual stream is always fp32 (it accumulates every sublayer;
// keeping it in bf16 would round it 2 * num_layers times). Each output row
// depends only on its own input row with a reduction order fixed by the row
// length, so results are batch-invariant and deterministic.
#pragma once

#include "kernels/cuda/cuda_types.h"

namespace kvserve::kernels::cuda {

// residual[i] = float(table[ids[i]])  (table: [vocab, dim] of table_type;
// residual: [n, dim] fp32). ids are checked by the caller.
cudaError_t EmbeddingLookup(const void* table, ElemType table_type, int64_t dim, const int32_t* ids,
                            int64_t n, float* residual, cudaStream_t stream);

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * (weight_offset + weight)   (x fp32;
// weight [dim] of weight_type; y of y_type). weight_offset is 1 for Gemma's
// (1 + w) norms (added in fp32, as transformers does), 0 otherwise.
cudaError_t RmsNorm(const float* x, const void* weight, ElemType weight_type, void* y,
                    ElemType y_type, int64_t rows, int64_t dim, float eps, cudaStream_t stream,
                    float weight_offset = 0.0f);

// residual[r] += float(x[r]); y[r] = RmsNorm(residual[r])  (x of y_type)
cudaError_t AddRmsNorm(float* residual, const void* x, const void* weight, ElemType weight_type,
                       void* y, ElemType y_type, int64_t rows, int64_t dim, float eps,
                       cudaStream_t stream, float weight_offset = 0.0f);

// In place, per head: for token t < num_tokens and head h < num_heads the
// head_dim elements at x + t * token_stride + h * head_dim become
// RmsNorm(them) * (weight_offset + weight), arithmetic in fp32 (weight
// [head_dim] of x's type). Qwen3 / Gemma 3 q and k norms (num_heads heads of
// the fused qkv row), and with num_heads = 1 Gemma's sandwich norms of a
// sublayer's output. The CUDA twin of kernels/cpu HeadRmsNorm.
cudaError_t HeadRmsNorm(void* x, ElemType type, int64_t token_stride, int64_t num_tokens,
                        int64_t num_heads, const void* weight, int64_t head_dim, float eps,
                        float weight_offset, cudaStream_t stream);

// In place, per head, as kernels/cpu RotateHeads: each block of `block`
// elements (a power of two dividing head_dim; head_dim <= 1024) becomes H x
// (the normalized Walsh-Hadamard transform: butterflies in fp32, then times
// norm = 1 / sqrt(block)), x of `type`. The quantized KV caches' rotation.
cudaError_t RotateHeads(void* x, ElemType type, int64_t token_stride, int64_t num_tokens,
                        int64_t num_heads, int64_t head_dim, int64_t block, float norm,
                        cudaStream_t stream);

// Rotary embedding, Hugging Face "rotate half" convention, in place, as
// kernels/cpu/elementwise.h ApplyRope: angle = float(pos) * inv_freq[i] in
// fp32 (inv_freq already includes linear / llama3 scaling), cos and sin by
// the accurate sincosf, times attention_scaling.
struct CudaRopeParams {
  ElemType dtype = ElemType::kBF16;  // of q and k
  void* q = nullptr;                 // [num_tokens, num_heads, head_dim], token stride q_stride
  void* k = nullptr;                 // [num_tokens, num_kv_heads, head_dim], token stride k_stride
  int64_t q_stride = 0;
  int64_t k_stride = 0;
  const int32_t* positions = nullptr;  // [num_tokens]
  const float* inv_freq = nullptr;     // [rotary_dim / 2]
  float attention_scaling = 1.0f;
  int num_tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  // Partial rotary: only the first rotary_dim elements of each head rotate
  // (pairs i, i + rotary_dim / 2); 0 means head_dim.
  int rotary_dim = 0;
};
cudaError_t ApplyRope(const CudaRopeParams& p, cudaStream_t stream);

// out[r][i] = silu(gate_up[r][i]) * gate_up[r][inter + i]; both of `type`.
cudaError_t SiluMul(const void* gate_up, void* out, ElemType type, int64_t rows, int64_t inter,
                    cudaStream_t stream);

// out[r][i] = gelu_tanh(gate_up[r][i]) * gate_up[r][inter + i] (GeGLU with
// torch's tanh-approximate GELU, as kernels/cpu GeluTanhMul).
cudaError_t GeluTanhMul(const void* gate_up, void* out, ElemType type, int64_t rows, int64_t inter,
                        cudaStream_t stream);

// x[i] *= s for n fp32 values (Gemma's embedding scaling of the residual).
cudaError_t ScaleF32(float* x, int64_t n, float s, cudaStream_t stream);

// x[i] = tanh(x[i] / cap) * cap for n fp32 values (final logit soft-capping).
cudaError_t SoftCapF32(float* x, int64_t n, float cap, cudaStream_t stream);

// dst[r] = src[indices[r]] for rows of `row_bytes` bytes (gathers the rows
// whose logits a step returns).
cudaError_t GatherRows(const void* src, const int32_t* indices, int64_t rows, int64_t row_bytes,
                       void* dst, cudaStream_t stream);

// dst[i] = convert(src[i]) for n fp32 values (round to nearest even).
cudaError_t ConvertFromF32(const float* src, void* dst, ElemType dst_type, int64_t n,
                           cudaStream_t stream);
// dst[i] = convert(src[i]) from fp16 or bf16 (loading checkpoints whose dtype
// differs from the serving dtype).
cudaError_t ConvertElems(const void* src, ElemType src_type, void* dst, ElemType dst_type,
                         int64_t n, cudaStream_t stream);

// dst[i] = convert(offset + scale * HashUniform(seed, tensor_index, i)) for
// i < n: the builtin models' weights (engine/builtin_models.cc, the same
// SplitMix64 hash, bit for bit in fp32), generated on the device so that
// large builtin shapes need no host memory.
cudaError_t FillHashUniform(void* dst, ElemType dst_type, int64_t n, uint64_t seed,
                            uint64_t tensor_index, float scale, float offset, cudaStream_t stream);

// dst[i] = value for n elements of `type` (tests poison buffers with NaN).
cudaError_t Fill(void* dst, ElemType type, int64_t n, float value, cudaStream_t stream);

}  // namespace kvserve::kernels::cuda
