#include "engine/model_weights.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvserve::engine {
namespace {

using kernels::AlignedBuffer;
using kernels::PackedMatrix;

absl::StatusOr<AlignedBuffer> ReadVector(const SafetensorsCheckpoint& ckpt, const std::string& name,
                                         int64_t size) {
  AlignedBuffer out(size);
  const int64_t shape[] = {size};
  KVSERVE_RETURN_IF_ERROR(ckpt.ReadF32(name, shape, out.data()));
  ckpt.Release(name);
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

using kernels::WeightFormat;

// The storage format of a matrix made of tensors of these dtypes.
WeightFormat TargetFormat(const WeightOptions& o, const std::vector<const TensorInfo*>& tensors,
                          bool quantize) {
  if (quantize && o.matmul_precision == MatmulPrecision::kBfloat16) return WeightFormat::kBF16Dot;
  if (quantize && o.quantization == Quantization::kInt8) return WeightFormat::kInt8;
  if (quantize && o.quantization == Quantization::kW8A8) return WeightFormat::kW8A8;
  switch (o.dtype) {
    case WeightDtype::kFloat32:
      return WeightFormat::kF32;
    case WeightDtype::kBfloat16:
      return WeightFormat::kBF16;
    case WeightDtype::kFloat16:
      return WeightFormat::kF16;
    case WeightDtype::kAuto:
      break;
  }
  // auto: the tensors' own 16-bit format when they share one, else fp32.
  const DType first = tensors.front()->dtype;
  for (const TensorInfo* t : tensors) {
    if (t->dtype != first) return WeightFormat::kF32;
  }
  return first == DType::kBF16  ? WeightFormat::kBF16
         : first == DType::kF16 ? WeightFormat::kF16
                                : WeightFormat::kF32;
}

// Reads row blocks `names` (each [rows_i, cols]) one after another and packs
// them in the format `o` asks for (quantize: int8 applies to this matrix).
// A 16-bit checkpoint kept in its own format is packed from its bits, never
// widened; otherwise the rows pass through one fp32 buffer of this matrix.
absl::StatusOr<PackedMatrix> PackTensors(const SafetensorsCheckpoint& ckpt,
                                         const std::vector<std::pair<std::string, int64_t>>& names,
                                         int64_t cols, const WeightOptions& o, bool quantize);

// PackTensors, then releases the tensors (SafetensorsCheckpoint::Release).
absl::StatusOr<PackedMatrix> ReadPacked(const SafetensorsCheckpoint& ckpt,
                                        const std::vector<std::pair<std::string, int64_t>>& names,
                                        int64_t cols, const WeightOptions& o,
                                        bool quantize = true) {
  absl::StatusOr<PackedMatrix> packed = PackTensors(ckpt, names, cols, o, quantize);
  for (const auto& entry : names) ckpt.Release(entry.first);
  return packed;
}

absl::StatusOr<PackedMatrix> PackTensors(const SafetensorsCheckpoint& ckpt,
                                         const std::vector<std::pair<std::string, int64_t>>& names,
                                         int64_t cols, const WeightOptions& o, bool quantize) {
  int64_t total_rows = 0;
  std::vector<const TensorInfo*> tensors;
  for (const auto& [name, rows] : names) {
    const int64_t shape[] = {rows, cols};
    absl::StatusOr<const TensorInfo*> t = ckpt.FindWithShape(name, shape);
    if (!t.ok()) return t.status();
    tensors.push_back(*t);
    total_rows += rows;
  }
  const WeightFormat format = TargetFormat(o, tensors, quantize);
  const DType same = format == WeightFormat::kBF16 || format == WeightFormat::kBF16Dot
                         ? DType::kBF16
                     : format == WeightFormat::kF16 ? DType::kF16
                                                    : DType::kF32;
  bool raw16 = same != DType::kF32;
  for (const TensorInfo* t : tensors) raw16 = raw16 && t->dtype == same;
  if (raw16) {
    if (tensors.size() == 1)
      return kernels::PackWeights16(tensors[0]->data, total_rows, cols, format);
    std::vector<uint8_t> bits;
    bits.reserve(static_cast<size_t>(total_rows * cols * 2));
    for (const TensorInfo* t : tensors) bits.insert(bits.end(), t->data, t->data + t->num_bytes);
    return kernels::PackWeights16(bits.data(), total_rows, cols, format);
  }
  std::vector<float> rows_buffer(static_cast<size_t>(total_rows * cols));
  int64_t row = 0;
  for (const auto& [name, rows] : names) {
    const int64_t shape[] = {rows, cols};
    KVSERVE_RETURN_IF_ERROR(ckpt.ReadF32(name, shape, rows_buffer.data() + row * cols));
    row += rows;
  }
  return kernels::PackWeights(rows_buffer.data(), total_rows, cols, format);
}

}  // namespace

absl::StatusOr<WeightDtype> ParseWeightDtype(std::string_view name) {
  if (name == "auto") return WeightDtype::kAuto;
  if (name == "float32") return WeightDtype::kFloat32;
  if (name == "bfloat16") return WeightDtype::kBfloat16;
  if (name == "float16") return WeightDtype::kFloat16;
  return absl::InvalidArgumentError(absl::StrCat("unknown weight dtype \"", std::string(name),
                                                 "\" (auto, float32, bfloat16, float16)"));
}

absl::StatusOr<Quantization> ParseQuantization(std::string_view name) {
  if (name == "none") return Quantization::kNone;
  if (name == "int8") return Quantization::kInt8;
  if (name == "w8a8") return Quantization::kW8A8;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown quantization \"", std::string(name), "\" (none, int8, w8a8)"));
}

absl::StatusOr<MatmulPrecision> ParseMatmulPrecision(std::string_view name) {
  if (name == "float32") return MatmulPrecision::kFloat32;
  if (name == "bfloat16") return MatmulPrecision::kBfloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown matmul precision \"", std::string(name), "\" (float32, bfloat16)"));
}

const char* WeightDtypeName(WeightDtype dtype) {
  switch (dtype) {
    case WeightDtype::kAuto:
      return "auto";
    case WeightDtype::kFloat32:
      return "float32";
    case WeightDtype::kBfloat16:
      return "bfloat16";
    case WeightDtype::kFloat16:
      return "float16";
  }
  return "?";
}

const char* QuantizationName(Quantization quantization) {
  switch (quantization) {
    case Quantization::kNone:
      return "none";
    case Quantization::kInt8:
      return "int8";
    case Quantization::kW8A8:
      return "w8a8";
  }
  return "?";
}

int64_t ModelWeights::StreamedBytesPerToken() const {
  int64_t bytes = lm_head.StorageBytes() + static_cast<int64_t>(final_norm.size() * sizeof(float));
  for (const LayerWeights& l : layers) {
    bytes += l.qkv.StorageBytes() + l.o_proj.StorageBytes() + l.gate_up.StorageBytes() +
             l.down.StorageBytes() +
             static_cast<int64_t>((l.input_norm.size() + l.mlp_input_norm.size() +
                                   l.attn_output_norm.size() + l.mlp_output_norm.size() +
                                   l.q_norm.size() + l.k_norm.size() + l.qkv_bias.size() +
                                   l.o_proj_bias.size()) *
                                  sizeof(float));
  }
  return bytes;
}

int64_t ModelWeights::TotalBytes() const {
  return StreamedBytesPerToken() + embed_tokens.StorageBytes();
}

absl::StatusOr<ModelWeights> LoadWeights(const ModelConfig& c, const SafetensorsCheckpoint& ckpt,
                                         const WeightOptions& o) {
  const int64_t hidden = c.hidden_size;
  const int64_t q_rows = c.num_heads * c.head_dim;
  const int64_t kv_rows = c.num_kv_heads * c.head_dim;
  ModelWeights w;

  // Tied: one table, packed as the lm_head (and quantized with it under
  // int8), read by the embedding lookup too. Untied: its own table in the
  // WeightDtype format, never quantized (it is not streamed per token).
  {
    KVSERVE_ASSIGN_OR_RETURN((c.tie_word_embeddings ? w.lm_head : w.embed_tokens),
                             ReadPacked(ckpt, {{"model.embed_tokens.weight", c.vocab_size}}, hidden,
                                        o, /*quantize=*/c.tie_word_embeddings));
  }

  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    LayerWeights l;
    KVSERVE_ASSIGN_OR_RETURN(l.input_norm, ReadNorm(c, ckpt, p + "input_layernorm.weight", hidden));

    // Phi-3 stores q/k/v and gate/up fused, in kvserve's row order.
    const bool fused = c.model_type == "phi3";
    if (fused) {
      KVSERVE_ASSIGN_OR_RETURN(
          l.qkv,
          ReadPacked(ckpt, {{p + "self_attn.qkv_proj.weight", q_rows + 2 * kv_rows}}, hidden, o));
    } else {
      KVSERVE_ASSIGN_OR_RETURN(l.qkv, ReadPacked(ckpt,
                                                 {{p + "self_attn.q_proj.weight", q_rows},
                                                  {p + "self_attn.k_proj.weight", kv_rows},
                                                  {p + "self_attn.v_proj.weight", kv_rows}},
                                                 hidden, o));
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
      KVSERVE_ASSIGN_OR_RETURN(l.q_norm,
                               ReadNorm(c, ckpt, p + "self_attn.q_norm.weight", c.head_dim));
      KVSERVE_ASSIGN_OR_RETURN(l.k_norm,
                               ReadNorm(c, ckpt, p + "self_attn.k_norm.weight", c.head_dim));
    }

    KVSERVE_ASSIGN_OR_RETURN(
        l.o_proj, ReadPacked(ckpt, {{p + "self_attn.o_proj.weight", hidden}}, q_rows, o));
    if (c.o_proj_bias) {
      l.o_proj_bias.resize(hidden);
      const int64_t shape[] = {hidden};
      if (auto s = ckpt.ReadF32(p + "self_attn.o_proj.bias", shape, l.o_proj_bias.data());
          !s.ok()) {
        return s;
      }
    }

    if (c.sandwich_norms) {  // Gemma
      KVSERVE_ASSIGN_OR_RETURN(l.attn_output_norm,
                               ReadNorm(c, ckpt, p + "post_attention_layernorm.weight", hidden));
      KVSERVE_ASSIGN_OR_RETURN(l.mlp_input_norm,
                               ReadNorm(c, ckpt, p + "pre_feedforward_layernorm.weight", hidden));
      KVSERVE_ASSIGN_OR_RETURN(l.mlp_output_norm,
                               ReadNorm(c, ckpt, p + "post_feedforward_layernorm.weight", hidden));
    } else {
      KVSERVE_ASSIGN_OR_RETURN(l.mlp_input_norm,
                               ReadNorm(c, ckpt, p + "post_attention_layernorm.weight", hidden));
    }

    if (fused) {
      KVSERVE_ASSIGN_OR_RETURN(
          l.gate_up,
          ReadPacked(ckpt, {{p + "mlp.gate_up_proj.weight", 2 * c.intermediate_size}}, hidden, o));
    } else {
      KVSERVE_ASSIGN_OR_RETURN(l.gate_up,
                               ReadPacked(ckpt,
                                          {{p + "mlp.gate_proj.weight", c.intermediate_size},
                                           {p + "mlp.up_proj.weight", c.intermediate_size}},
                                          hidden, o));
    }
    KVSERVE_ASSIGN_OR_RETURN(
        l.down, ReadPacked(ckpt, {{p + "mlp.down_proj.weight", hidden}}, c.intermediate_size, o));
    w.layers.push_back(std::move(l));
  }

  KVSERVE_ASSIGN_OR_RETURN(w.final_norm, ReadNorm(c, ckpt, "model.norm.weight", hidden));

  if (!c.tie_word_embeddings) {
    KVSERVE_ASSIGN_OR_RETURN(w.lm_head,
                             ReadPacked(ckpt, {{"lm_head.weight", c.vocab_size}}, hidden, o));
  }
  return w;
}

}  // namespace kvserve::engine
