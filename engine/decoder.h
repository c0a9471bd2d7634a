// The forward pass of every decoder-only family kvserve serves (Llama,
// Mistral, Qwen2, Qwen3, Phi-3, Gemma 2, Gemma 3), written once over a
// backend's operations. The CPU runner (engine/model_runner.cc) and the CUDA
// runner (engine/cuda/cuda_model_runner.cc) each supply an Ops type; the
// families differ only in the ModelConfig features read below (qk_norm,
// sandwich_norms, scale_embeddings, local rope, sliding windows, soft-caps,
// the activation).
//
// An Ops type holds one step's state (its tokens, positions, block tables,
// its KV cache and thread pool or stream), so every per-token operation runs
// over the step's n tokens. X is the backend's activation pointer (float* on
// the CPU, void* in the serving dtype on CUDA); Weights / LayerWeights are its
// weight structs, with the members named as in engine/model_weights.h.
//
//   X At(X base, int64_t elements)               base + elements
//   Embed(X residual)                            the step's tokens' embedding rows
//   ScaleResidual(X residual, float factor)      residual *= factor
//   Norm(X in, norm, X out, what)                out = rms_norm(in) * norm
//   HeadNorm(X x, int64_t stride, int64_t heads, norm, what)   per-head norm, in place
//   NormInPlace(X x, norm, what)                 x = rms_norm(x) * norm
//   AddNorm(X residual, X x, norm, X normed, what)   residual += x; normed = norm(residual)
//   Linear(X in, int64_t k, matrix, bias, int64_t n, X out, what)   out = in W^T (+ bias)
//   Rope(X q, X k, int64_t stride, bool local)   rotary embedding of q and k, in place
//   bool KvRowsRotated()                         the cache stores rotated K and V rows
//   RotateHeads(X x, int64_t stride, int64_t heads)   x = H x per head (kernels::RotateHeads)
//   WriteKv(int64_t layer, X k, X v, int64_t stride)   K/V into the layer's cache slots
//   Attention(int64_t layer, X q, int64_t stride, const AttentionShape&, X out)
//   GatedActivation(Activation, X gate_up, X out)      act(gate) * up
//   GatherLogitRows(X normed, X gathered)        the rows StepInput::logits_indices names
//   Logits(X gathered, int64_t rows, X logits)   lm_head, fp32 logits
//   SoftCap(X logits, int64_t count, float cap)
//
// each returning absl::Status (OK on the CPU, whose kernels cannot fail), and
// `what` naming the operation in a device error. Numerics belong to the
// backend: the CPU's kernels keep a token's values independent of the batch
// (engine/model_runner.h), which this definition does not change.
#pragma once

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "engine/loader/model_config.h"

namespace kvserve::engine {

// What attention needs to know about a layer.
struct AttentionShape {
  float scale = 1.0f;      // on q.k
  int sliding_window = 0;  // 0: the whole context
  float softcap = 0.0f;    // 0: none (Gemma 2's attn_logit_softcapping)
};

// The activations a step's layers pass between them, in the backend's X.
// residual and normed are [n, hidden]; qkv [n, (H + 2 KV) * D] (q, then k,
// then v in each row); attn [n, H * D]; proj [n, hidden]; gate_up [n, 2 I];
// act [n, I]; gathered [rows, hidden] and logits [rows, vocab] (fp32).
template <class X>
struct DecoderActivations {
  X residual, normed, qkv, attn, proj, gate_up, act, gathered, logits;
};

// One decoder layer. On entry a.normed = input_norm(residual); on exit the
// residual has both sublayers added and a.normed = the next norm of it (the
// next layer's input norm, or the final norm after the last layer).
//
//   Llama family:  r += o_proj(attn(qkv(normed)));      normed = mlp_input_norm(r)
//                  r += down(act(gate_up(normed)));     normed = next_norm(r)
//   Gemma (sandwich_norms) norms each sublayer's output before the add:
//                  r += attn_output_norm(o_proj(...));   r += mlp_output_norm(down(...))
template <class Ops, class Weights, class X>
absl::Status RunDecoderLayer(Ops& ops, const ModelConfig& c, const Weights& w,
                             const DecoderActivations<X>& a, int64_t layer) {
  const auto& lw = w.layers[layer];
  const int64_t hidden = c.hidden_size;
  const int64_t q_width = c.num_heads * c.head_dim;
  const int64_t kv_width = c.num_kv_heads * c.head_dim;
  const int64_t qkv_width = q_width + 2 * kv_width;
  const int64_t inter = c.intermediate_size;
  const X q = a.qkv;
  const X k = ops.At(a.qkv, q_width);
  const X v = ops.At(a.qkv, q_width + kv_width);

  KVSERVE_RETURN_IF_ERROR(
      ops.Linear(a.normed, hidden, lw.qkv, lw.qkv_bias, qkv_width, a.qkv, "qkv_proj"));
  if (c.qk_norm) {  // Qwen3, Gemma 3: per-head norms before RoPE
    KVSERVE_RETURN_IF_ERROR(ops.HeadNorm(q, qkv_width, c.num_heads, lw.q_norm, "q norm"));
    KVSERVE_RETURN_IF_ERROR(ops.HeadNorm(k, qkv_width, c.num_kv_heads, lw.k_norm, "k norm"));
  }
  KVSERVE_RETURN_IF_ERROR(ops.Rope(q, k, qkv_width, c.LayerUsesLocalRope(layer)));
  // A quantized cache holds H k and H v (engine/kv_cache.h): q is rotated
  // too, so that the scores are those of q . k, and the output, a sum of
  // rotated values, is rotated back (H is its own inverse).
  const bool rotated = ops.KvRowsRotated();
  if (rotated) {
    KVSERVE_RETURN_IF_ERROR(ops.RotateHeads(q, qkv_width, c.num_heads));
    KVSERVE_RETURN_IF_ERROR(ops.RotateHeads(k, qkv_width, 2 * c.num_kv_heads));  // k and v
  }
  KVSERVE_RETURN_IF_ERROR(ops.WriteKv(layer, k, v, qkv_width));
  const AttentionShape attention{.scale = c.AttentionScale(),
                                 .sliding_window = static_cast<int>(c.LayerSlidingWindow(layer)),
                                 .softcap = static_cast<float>(c.attn_logit_softcapping)};
  KVSERVE_RETURN_IF_ERROR(ops.Attention(layer, q, qkv_width, attention, a.attn));
  if (rotated) KVSERVE_RETURN_IF_ERROR(ops.RotateHeads(a.attn, q_width, c.num_heads));
  KVSERVE_RETURN_IF_ERROR(
      ops.Linear(a.attn, q_width, lw.o_proj, lw.o_proj_bias, hidden, a.proj, "o_proj"));
  if (c.sandwich_norms) {
    KVSERVE_RETURN_IF_ERROR(ops.NormInPlace(a.proj, lw.attn_output_norm, "attention output norm"));
  }
  KVSERVE_RETURN_IF_ERROR(
      ops.AddNorm(a.residual, a.proj, lw.mlp_input_norm, a.normed, "mlp input norm"));

  KVSERVE_RETURN_IF_ERROR(
      ops.Linear(a.normed, hidden, lw.gate_up, nullptr, 2 * inter, a.gate_up, "gate_up_proj"));
  KVSERVE_RETURN_IF_ERROR(ops.GatedActivation(c.hidden_act, a.gate_up, a.act));
  KVSERVE_RETURN_IF_ERROR(ops.Linear(a.act, inter, lw.down, nullptr, hidden, a.proj, "down_proj"));
  if (c.sandwich_norms) {
    KVSERVE_RETURN_IF_ERROR(ops.NormInPlace(a.proj, lw.mlp_output_norm, "mlp output norm"));
  }
  const bool last = layer + 1 == c.num_layers;
  const auto& next_norm = last ? w.final_norm : w.layers[layer + 1].input_norm;
  return ops.AddNorm(a.residual, a.proj, next_norm, a.normed, "post-mlp norm");
}

// The whole step: embedding, every layer, and the logits of `logit_rows`
// rows (none: the step only fills the KV cache).
template <class Ops, class Weights, class X>
absl::Status RunDecoder(Ops& ops, const ModelConfig& c, const Weights& w,
                        const DecoderActivations<X>& a, int64_t logit_rows) {
  KVSERVE_RETURN_IF_ERROR(ops.Embed(a.residual));
  if (c.scale_embeddings) {
    // Gemma: hidden_size**0.5 as an fp32 tensor (the residual's dtype).
    KVSERVE_RETURN_IF_ERROR(ops.ScaleResidual(
        a.residual, static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)))));
  }
  KVSERVE_RETURN_IF_ERROR(ops.Norm(a.residual, w.layers[0].input_norm, a.normed, "input norm"));
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    KVSERVE_RETURN_IF_ERROR(RunDecoderLayer(ops, c, w, a, layer));
  }
  // a.normed = the final norm of the residual stream.
  if (logit_rows == 0) return absl::OkStatus();
  KVSERVE_RETURN_IF_ERROR(ops.GatherLogitRows(a.normed, a.gathered));
  KVSERVE_RETURN_IF_ERROR(ops.Logits(a.gathered, logit_rows, a.logits));
  if (c.final_logit_softcapping > 0.0) {
    return ops.SoftCap(a.logits, logit_rows * c.vocab_size,
                       static_cast<float>(c.final_logit_softcapping));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::engine
