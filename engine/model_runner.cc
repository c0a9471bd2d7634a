#include "engine/model_runner.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"

namespace kvserve::engine {
namespace {

KvCacheShape ShapeFor(const ModelConfig& c, const RunnerOptions& o) {
  return KvCacheShape{.num_layers = c.num_layers,
                      .num_blocks = o.num_blocks,
                      .num_kv_heads = c.num_kv_heads,
                      .block_size = o.block_size,
                      .head_dim = c.head_dim,
                      .dtype = o.kv_cache_dtype};
}

void Linear(const float* x, int64_t m, int64_t ldx, const kernels::PackedMatrix& w,
            const float* bias, float* y, kernels::ThreadPool* pool) {
  kernels::Gemm({.x = x, .ldx = ldx, .w = &w, .bias = bias, .y = y, .ldy = w.n, .m = m}, pool);
}

}  // namespace

ModelRunner::ModelRunner(const Model& model, const RunnerOptions& options)
    : model_(model),
      cache_(ShapeFor(model.config, options)),
      pool_(options.pool != nullptr ? options.pool : &kernels::ThreadPool::Default()) {}

absl::StatusOr<StepOutput> ModelRunner::Step(const StepInput& in) {
  if (absl::Status s = ValidateStepInput(in, model_.config.vocab_size, num_blocks(), block_size());
      !s.ok()) {
    return s;
  }
  if (!in.sample_specs.empty()) {
    return absl::InvalidArgumentError(
        "step input: the CPU runner returns logits; it does not sample");
  }
  const ModelConfig& c = model_.config;
  const ModelWeights& w = model_.weights;
  const int64_t n = in.num_tokens();
  const int64_t hidden = c.hidden_size;
  const int64_t q_width = c.num_heads * c.head_dim;
  const int64_t qkv_width = q_width + 2 * c.num_kv_heads * c.head_dim;

  token_seq_.resize(n);
  for (int32_t s = 0; s < in.num_seqs(); ++s) {
    for (int32_t i = in.query_start[s]; i < in.query_start[s + 1]; ++i) token_seq_[i] = s;
  }
  residual_.resize(n * hidden);
  normed_.resize(n * hidden);
  qkv_.resize(n * qkv_width);
  attn_.resize(n * q_width);
  proj_.resize(n * hidden);
  gate_up_.resize(n * 2 * c.intermediate_size);
  act_.resize(n * c.intermediate_size);

  kernels::EmbeddingLookup(w.embedding(), in.token_ids.data(), n, residual_.data());
  if (c.scale_embeddings) {
    // Gemma: hidden_size**0.5 as an fp32 tensor (the activation dtype here).
    kernels::Scale(residual_.data(), n * hidden,
                   static_cast<float>(std::sqrt(static_cast<double>(hidden))));
  }
  kernels::RmsNorm(residual_.data(), w.layers[0].input_norm.data(), normed_.data(), n, hidden,
                   static_cast<float>(c.rms_norm_eps), pool_);
  for (int64_t layer = 0; layer < c.num_layers; ++layer) RunLayer(layer, in);
  // After the last layer normed_ holds the final norm of the residual stream.

  StepOutput out;
  out.vocab_size = c.vocab_size;
  const int64_t rows = static_cast<int64_t>(in.logits_indices.size());
  if (rows == 0) return out;
  gathered_.resize(rows * hidden);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(normed_.data() + in.logits_indices[r] * hidden, hidden,
                gathered_.data() + r * hidden);
  }
  out.logits.resize(rows * c.vocab_size);
  Linear(gathered_.data(), rows, hidden, w.lm_head, nullptr, out.logits.data(), pool_);
  if (c.final_logit_softcapping > 0.0) {
    kernels::SoftCap(out.logits.data(), rows * c.vocab_size,
                     static_cast<float>(c.final_logit_softcapping));
  }
  return out;
}

// One decoder layer. On entry normed_ = input_norm(residual_); on exit
// residual_ has both sublayers added and normed_ = the next norm of it (the
// next layer's input norm, or the final norm after the last layer).
//
//   Llama family:  r += o_proj(attn(qkv(normed)));      normed = mlp_input_norm(r)
//                  r += down(act(gate_up(normed)));     normed = next_norm(r)
//   Gemma (sandwich_norms) norms each sublayer's output before the add:
//                  r += attn_output_norm(o_proj(...));   r += mlp_output_norm(down(...))
void ModelRunner::RunLayer(int64_t layer, const StepInput& in) {
  const ModelConfig& c = model_.config;
  const LayerWeights& lw = model_.weights.layers[layer];
  const int64_t n = in.num_tokens();
  const int64_t hidden = c.hidden_size;
  const int64_t d = c.head_dim;
  const int64_t q_width = c.num_heads * d;
  const int64_t kv_width = c.num_kv_heads * d;
  const int64_t qkv_width = q_width + 2 * kv_width;
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* q = qkv_.data();
  float* k = q + q_width;
  float* v = k + kv_width;

  Linear(normed_.data(), n, hidden, lw.qkv, lw.qkv_bias.empty() ? nullptr : lw.qkv_bias.data(),
         qkv_.data(), pool_);
  if (c.qk_norm) {  // Qwen3, Gemma 3: per-head norms before RoPE
    kernels::HeadRmsNorm(q, qkv_width, n, c.num_heads, lw.q_norm.data(), d, eps, pool_);
    kernels::HeadRmsNorm(k, qkv_width, n, c.num_kv_heads, lw.k_norm.data(), d, eps, pool_);
  }
  const bool local_rope = c.LayerUsesLocalRope(layer);
  kernels::ApplyRope(
      {.q = q,
       .k = k,
       .q_stride = qkv_width,
       .k_stride = qkv_width,
       .positions = in.positions.data(),
       .inv_freq = local_rope ? model_.local_rope_inv_freq.data() : model_.rope_inv_freq.data(),
       .attention_scaling = local_rope ? 1.0f : model_.rope_attention_scaling,
       .num_tokens = static_cast<int>(n),
       .num_heads = static_cast<int>(c.num_heads),
       .num_kv_heads = static_cast<int>(c.num_kv_heads),
       .head_dim = static_cast<int>(d),
       .rotary_dim = static_cast<int>(c.RotaryDim())},
      pool_);
  kernels::WriteKvCache({.k = k,
                         .v = v,
                         .src_stride = qkv_width,
                         .k_cache = cache_.k(layer),
                         .v_cache = cache_.v(layer),
                         .kv_dtype = cache_.shape().dtype,
                         .k_scales = cache_.k_scales(layer),
                         .v_scales = cache_.v_scales(layer),
                         .slot_mapping = in.slot_mapping.data(),
                         .num_tokens = static_cast<int>(n),
                         .num_kv_heads = static_cast<int>(c.num_kv_heads),
                         .head_dim = static_cast<int>(d),
                         .block_size = static_cast<int>(block_size())});
  kernels::PagedAttention({.q = q,
                           .q_stride = qkv_width,
                           .out = attn_.data(),
                           .k_cache = cache_.k(layer),
                           .v_cache = cache_.v(layer),
                           .kv_dtype = cache_.shape().dtype,
                           .k_scales = cache_.k_scales(layer),
                           .v_scales = cache_.v_scales(layer),
                           .num_tokens = static_cast<int>(n),
                           .num_heads = static_cast<int>(c.num_heads),
                           .num_kv_heads = static_cast<int>(c.num_kv_heads),
                           .head_dim = static_cast<int>(d),
                           .block_size = static_cast<int>(block_size()),
                           .token_seq = token_seq_.data(),
                           .token_pos = in.positions.data(),
                           .block_table_start = in.block_table_start.data(),
                           .block_ids = in.block_ids.data(),
                           .scale = c.AttentionScale(),
                           .sliding_window = static_cast<int>(c.LayerSlidingWindow(layer)),
                           .softcap = static_cast<float>(c.attn_logit_softcapping)},
                          pool_);
  Linear(attn_.data(), n, q_width, lw.o_proj,
         lw.o_proj_bias.empty() ? nullptr : lw.o_proj_bias.data(), proj_.data(), pool_);
  if (c.sandwich_norms) {
    kernels::RmsNorm(proj_.data(), lw.attn_output_norm.data(), proj_.data(), n, hidden, eps, pool_);
  }
  kernels::AddRmsNorm(residual_.data(), proj_.data(), lw.mlp_input_norm.data(), normed_.data(), n,
                      hidden, eps, pool_);

  Linear(normed_.data(), n, hidden, lw.gate_up, nullptr, gate_up_.data(), pool_);
  if (c.hidden_act == Activation::kGeluTanh) {
    kernels::GeluTanhMul(gate_up_.data(), act_.data(), n, c.intermediate_size, pool_);
  } else {
    kernels::SiluMul(gate_up_.data(), act_.data(), n, c.intermediate_size, pool_);
  }
  Linear(act_.data(), n, c.intermediate_size, lw.down, nullptr, proj_.data(), pool_);
  if (c.sandwich_norms) {
    kernels::RmsNorm(proj_.data(), lw.mlp_output_norm.data(), proj_.data(), n, hidden, eps, pool_);
  }
  const bool last = layer + 1 == c.num_layers;
  const float* next_norm =
      last ? model_.weights.final_norm.data() : model_.weights.layers[layer + 1].input_norm.data();
  kernels::AddRmsNorm(residual_.data(), proj_.data(), next_norm, normed_.data(), n, hidden, eps,
                      pool_);
}

}  // namespace kvserve::engine
