// Row-wise kernels of a decoder layer. Each output row depends only on
// its own input row, with a reduction order fixed by the row length and the
// ISA path (ActiveIsa()): the AVX2 RmsNorm sums squares in 8-lane partial sums
// and the AVX2 SiluMul uses a vectorised exp, so scalar and AVX2 results
// differ in the last bits; each is deterministic. pool == nullptr runs on the
// calling thread.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::kernels {

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight          (x, y: [rows, dim])
void RmsNorm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps,
             ThreadPool* pool);

// residual[r] += x[r]; y[r] = RmsNorm(residual[r])  (the pre-norm residual step)
void AddRmsNorm(float* residual, const float* x, const float* weight, float* y, int64_t rows,
                int64_t dim, float eps, ThreadPool* pool);

// In place over every head of every token: x[t][h] = RmsNorm(x[t][h]) with a
// weight of [head_dim] (Qwen3 / Gemma 3 q_norm and k_norm). Head h of token t
// starts at x + t * stride + h * head_dim. Same arithmetic as RmsNorm.
void HeadRmsNorm(float* x, int64_t stride, int64_t num_tokens, int64_t num_heads,
                 const float* weight, int64_t head_dim, float eps, ThreadPool* pool);

// Rotary embedding, "rotate half" convention of Hugging Face Llama, over the
// first r = rotary_dim dims of each head (the rest pass through): for i < r/2,
//   (x[i], x[i + r/2]) <- (x[i] c - x[i + r/2] s, x[i + r/2] c + x[i] s)
// with angle = float(pos) * inv_freq[i] (fp32, as transformers computes it).
struct RopeParams {
  float* q = nullptr;  // [num_tokens, num_heads, head_dim], row stride q_stride
  float* k = nullptr;  // [num_tokens, num_kv_heads, head_dim], row stride k_stride
  int64_t q_stride = 0;
  int64_t k_stride = 0;
  const int32_t* positions = nullptr;  // [num_tokens]
  const float* inv_freq = nullptr;     // [head_dim / 2]
  float attention_scaling = 1.0f;      // multiplies cos and sin (1 for llama3 / default)
  int num_tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int rotary_dim = 0;  // 0: head_dim; else even, <= head_dim (Phi-3 partial rotary)
};
void ApplyRope(const RopeParams& p, ThreadPool* pool);

// The rotation the quantized KV caches store their rows in (engine/kv_cache.h):
// in place over every head of every token, each block of HadamardBlock(head_dim)
// consecutive elements becomes H x, H the normalized Walsh-Hadamard matrix of
// that size (block diagonal over the head when head_dim is not a power of
// two). H is symmetric and orthogonal, so applying it twice gives x back (up
// to rounding) and (H q) . (H k) = q . k; it spreads an outlier channel's
// magnitude over the block, which a per-row quantization scale then no longer
// follows alone. Butterflies in a fixed order, then one multiply by
// 1 / sqrt(block): a token's result depends on its own values alone.
// Head h of token t starts at x + t * stride + h * head_dim.
void RotateHeads(float* x, int64_t stride, int64_t num_tokens, int64_t num_heads, int64_t head_dim,
                 ThreadPool* pool);
// The largest power of two that divides head_dim, at most 256.
int64_t HadamardBlock(int64_t head_dim);

// out[r][i] = silu(gate_up[r][i]) * gate_up[r][inter + i], silu(g) = g / (1 + exp(-g)).
// gate_up: [rows, 2 * inter] (gate then up), out: [rows, inter].
void SiluMul(const float* gate_up, float* out, int64_t rows, int64_t inter, ThreadPool* pool);

// out[r][i] = gelu_tanh(gate_up[r][i]) * gate_up[r][inter + i] (Gemma's GeGLU),
// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) in fp32 in
// torch's order (gelu(approximate="tanh")). Scalar on every ISA.
void GeluTanhMul(const float* gate_up, float* out, int64_t rows, int64_t inter, ThreadPool* pool);

// x[i] = cap * tanh(x[i] / cap), computed as transformers does it
// ((x / cap).tanh() * cap, fp32). Gemma's logit soft-capping.
void SoftCap(float* x, int64_t n, float cap);

// x[i] *= s (Gemma's embedding scale).
void Scale(float* x, int64_t n, float s);

// out[i] = table[ids[i]]; ids are checked by the caller.
void EmbeddingLookup(const float* table, int64_t dim, const int32_t* ids, int64_t n, float* out);
// The same from a packed table (rows of W, [vocab, dim]: a tied lm_head is
// the embedding table): each row widened exactly, or int8 codes times their
// row's scale (PackedMatrix::ReadRow).
void EmbeddingLookup(const PackedMatrix& table, const int32_t* ids, int64_t n, float* out);

}  // namespace kvserve::kernels
