#include "engine/model_weights.h"

#include <cstring>

#include "absl/strings/str_cat.h"

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
              static_cast<int64_t>(l.input_norm.size() + l.post_attention_norm.size() +
                                   l.qkv_bias.size() + l.o_proj_bias.size());
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
    auto input_norm = ReadVector(ckpt, p + "input_layernorm.weight", hidden);
    if (!input_norm.ok()) return input_norm.status();
    l.input_norm = std::move(*input_norm);

    auto qkv = ReadPacked(ckpt,
                          {{p + "self_attn.q_proj.weight", q_rows},
                           {p + "self_attn.k_proj.weight", kv_rows},
                           {p + "self_attn.v_proj.weight", kv_rows}},
                          hidden);
    if (!qkv.ok()) return qkv.status();
    l.qkv = std::move(*qkv);
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

    auto o_proj = ReadPacked(ckpt, {{p + "self_attn.o_proj.weight", hidden}}, q_rows);
    if (!o_proj.ok()) return o_proj.status();
    l.o_proj = std::move(*o_proj);
    if (c.o_proj_bias) {
      l.o_proj_bias.resize(hidden);
      const int64_t shape[] = {hidden};
      if (auto s = ckpt.ReadF32(p + "self_attn.o_proj.bias", shape, l.o_proj_bias.data());
          !s.ok()) {
        return s;
      }
    }

    auto post_norm = ReadVector(ckpt, p + "post_attention_layernorm.weight", hidden);
    if (!post_norm.ok()) return post_norm.status();
    l.post_attention_norm = std::move(*post_norm);

    auto gate_up = ReadPacked(ckpt,
                              {{p + "mlp.gate_proj.weight", c.intermediate_size},
                               {p + "mlp.up_proj.weight", c.intermediate_size}},
                              hidden);
    if (!gate_up.ok()) return gate_up.status();
    l.gate_up = std::move(*gate_up);

    auto down = ReadPacked(ckpt, {{p + "mlp.down_proj.weight", hidden}}, c.intermediate_size);
    if (!down.ok()) return down.status();
    l.down = std::move(*down);
    w.layers.push_back(std::move(l));
  }

  auto final_norm = ReadVector(ckpt, "model.norm.weight", hidden);
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
