#include "engine/model_weights.h"

#include <cstring>

#include "absl/strings/str_cat.h"

// Assigns the value of the StatusOr `expr` to `lhs`, or returns its status.
#define WEIGHTS_ASSIGN_OR_RETURN(lhs, expr) \
  {                                         \
    auto v_ = (expr);                       \
    if (!v_.ok()) return v_.status();       \
    lhs = std::move(*v_);                   \
  }

namespace kvserve::engine {
namespace {

using kernels::AlignedBuffer;
using kernels::PackedMatrix;

absl::StatusOr<AlignedBuffer> ReadVector(const SafetensorsCheckpoint& ckpt, const std::string& name,
                                         int64_t size) {
  AlignedBuffer out(size);
  const int64_t shape[] = {size};
  if (absl::Status s = ckpt.ReadF32(name, shape, out.data()); !s.ok()) return s;
  return out;
}

// An RMSNorm weight as the kernel multiplies it: w, or 1 + w (Gemma; fp32
// addition, as transformers' `1.0 + self.weight.float()`).
absl::StatusOr<AlignedBuffer> ReadNorm(const ModelConfig& c, const SafetensorsCheckpoint& ckpt,
                                       const std::string& name, int64_t size) {
  absl::StatusOr<AlignedBuffer> w = ReadVector(ckpt, name, size);
  if (w.ok() && c.norm_weight_plus_one) {
    for (int64_t i = 0; i < size; ++i) w->data()[i] = 1.0f + w->data()[i];
  }
  return w;
}

// Reads row blocks `names` (each [rows_i, cols]) one after another and packs them.
absl::StatusOr<PackedMatrix> ReadPacked(const SafetensorsCheckpoint& ckpt,
                                        const std::vector<std::pair<std::string, int64_t>>& names,
                                        int64_t cols) {
  int64_t total_rows = 0;
  for (const auto& [name, rows] : names) total_rows += rows;
  std::vector<float> rows_buffer(static_cast<size_t>(total_rows * cols));
  int64_t row = 0;
  for (const auto& [name, rows] : names) {
    const int64_t shape[] = {rows, cols};
    if (absl::Status s = ckpt.ReadF32(name, shape, rows_buffer.data() + row * cols); !s.ok()) {
      return s;
    }
    row += rows;
  }
  return kernels::PackWeights(rows_buffer.data(), total_rows, cols);
}

}  // namespace

int64_t ModelWeights::StreamedBytesPerToken() const {
  auto packed = [](const PackedMatrix& m) { return static_cast<int64_t>(m.data.size()); };
  int64_t floats = packed(lm_head) + static_cast<int64_t>(final_norm.size());
  for (const LayerWeights& l : layers) {
    floats += packed(l.qkv) + packed(l.o_proj) + packed(l.gate_up) + packed(l.down) +
              static_cast<int64_t>(l.input_norm.size() + l.mlp_input_norm.size() +
                                   l.attn_output_norm.size() + l.mlp_output_norm.size() +
                                   l.q_norm.size() + l.k_norm.size() + l.qkv_bias.size() +
                                   l.o_proj_bias.size());
  }
  return floats * static_cast<int64_t>(sizeof(float));
}

absl::StatusOr<ModelWeights> LoadWeights(const ModelConfig& c, const SafetensorsCheckpoint& ckpt) {
  const int64_t hidden = c.hidden_size;
  const int64_t q_rows = c.num_heads * c.head_dim;
  const int64_t kv_rows = c.num_kv_heads * c.head_dim;
  ModelWeights w;

  w.embed_tokens = AlignedBuffer(c.vocab_size * hidden);
  {
    const int64_t shape[] = {c.vocab_size, hidden};
    if (auto s = ckpt.ReadF32("model.embed_tokens.weight", shape, w.embed_tokens.data()); !s.ok()) {
      return s;
    }
  }

  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    LayerWeights l;
    WEIGHTS_ASSIGN_OR_RETURN(l.input_norm, ReadNorm(c, ckpt, p + "input_layernorm.weight", hidden));

    // Phi-3 stores q/k/v and gate/up fused, in kvserve's row order.
    const bool fused = c.model_type == "phi3";
    if (fused) {
      WEIGHTS_ASSIGN_OR_RETURN(
          l.qkv,
          ReadPacked(ckpt, {{p + "self_attn.qkv_proj.weight", q_rows + 2 * kv_rows}}, hidden));
    } else {
      WEIGHTS_ASSIGN_OR_RETURN(l.qkv, ReadPacked(ckpt,
                                                 {{p + "self_attn.q_proj.weight", q_rows},
                                                  {p + "self_attn.k_proj.weight", kv_rows},
                                                  {p + "self_attn.v_proj.weight", kv_rows}},
                                                 hidden));
    }
    if (c.qkv_bias) {
      l.qkv_bias.resize(q_rows + 2 * kv_rows);
      const std::pair<const char*, int64_t> biases[] = {{"self_attn.q_proj.bias", q_rows},
                                                        {"self_attn.k_proj.bias", kv_rows},
                                                        {"self_attn.v_proj.bias", kv_rows}};
      float* out = l.qkv_bias.data();
      for (const auto& [name, rows] : biases) {
        const int64_t shape[] = {rows};
        if (auto s = ckpt.ReadF32(p + name, shape, out); !s.ok()) return s;
        out += rows;
      }
    }
    if (c.qk_norm) {
      WEIGHTS_ASSIGN_OR_RETURN(l.q_norm,
                               ReadNorm(c, ckpt, p + "self_attn.q_norm.weight", c.head_dim));
      WEIGHTS_ASSIGN_OR_RETURN(l.k_norm,
                               ReadNorm(c, ckpt, p + "self_attn.k_norm.weight", c.head_dim));
    }

    WEIGHTS_ASSIGN_OR_RETURN(l.o_proj,
                             ReadPacked(ckpt, {{p + "self_attn.o_proj.weight", hidden}}, q_rows));
    if (c.o_proj_bias) {
      l.o_proj_bias.resize(hidden);
      const int64_t shape[] = {hidden};
      if (auto s = ckpt.ReadF32(p + "self_attn.o_proj.bias", shape, l.o_proj_bias.data());
          !s.ok()) {
        return s;
      }
    }

    if (c.sandwich_norms) {  // Gemma
      WEIGHTS_ASSIGN_OR_RETURN(l.attn_output_norm,
                               ReadNorm(c, ckpt, p + "post_attention_layernorm.weight", hidden));
      WEIGHTS_ASSIGN_OR_RETURN(l.mlp_input_norm,
                               ReadNorm(c, ckpt, p + "pre_feedforward_layernorm.weight", hidden));
      WEIGHTS_ASSIGN_OR_RETURN(l.mlp_output_norm,
                               ReadNorm(c, ckpt, p + "post_feedforward_layernorm.weight", hidden));
    } else {
      WEIGHTS_ASSIGN_OR_RETURN(l.mlp_input_norm,
                               ReadNorm(c, ckpt, p + "post_attention_layernorm.weight", hidden));
    }

    if (fused) {
      WEIGHTS_ASSIGN_OR_RETURN(
          l.gate_up,
          ReadPacked(ckpt, {{p + "mlp.gate_up_proj.weight", 2 * c.intermediate_size}}, hidden));
    } else {
      WEIGHTS_ASSIGN_OR_RETURN(l.gate_up,
                               ReadPacked(ckpt,
                                          {{p + "mlp.gate_proj.weight", c.intermediate_size},
                                           {p + "mlp.up_proj.weight", c.intermediate_size}},
                                          hidden));
    }
    auto down = ReadPacked(ckpt, {{p + "mlp.down_proj.weight", hidden}}, c.intermediate_size);
    if (!down.ok()) return down.status();
    l.down = std::move(*down);
    w.layers.push_back(std::move(l));
  }

  auto final_norm = ReadNorm(c, ckpt, "model.norm.weight", hidden);
  if (!final_norm.ok()) return final_norm.status();
  w.final_norm = std::move(*final_norm);

  if (c.tie_word_embeddings) {
    w.lm_head = kernels::PackWeights(w.embed_tokens.data(), c.vocab_size, hidden);
  } else {
    auto lm_head = ReadPacked(ckpt, {{"lm_head.weight", c.vocab_size}}, hidden);
    if (!lm_head.ok()) return lm_head.status();
    w.lm_head = std::move(*lm_head);
  }
  return w;
}

}  // namespace kvserve::engine
