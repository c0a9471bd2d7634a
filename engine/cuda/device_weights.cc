#include "engine/cuda/device_weights.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/builtin_models.h"
#include "engine/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.h"

namespace kvserve::engine::cuda {
namespace {

using kernels::cuda::ElemSize;
using kernels::cuda::ElemType;

// One destination tensor of the device layout, made of source tensors
// stacked by rows (q/k/v, gate/up) or of one source tensor.
struct Part {
  std::string name;  // transformers name
  std::vector<int64_t> shape;
};
struct Slot {
  std::vector<Part> parts;
  void** dst = nullptr;
  bool streamed = true;  // read by every decode step (all but the embedding)
};

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The device layout of `c`, pointing into `w`'s fields.
std::vector<Slot> Layout(const ModelConfig& c, DeviceWeights& w) {
  const int64_t h = c.hidden_size, d = c.head_dim, inter = c.intermediate_size;
  const int64_t q_rows = c.num_heads * d, kv_rows = c.num_kv_heads * d;
  const bool fused = c.model_type == "phi3";  // as engine/model_weights.cc
  std::vector<Slot> slots;
  slots.push_back({{{"model.embed_tokens.weight", {c.vocab_size, h}}}, &w.embed_tokens, false});
  w.layers.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    DeviceLayerWeights& l = w.layers[i];
    slots.push_back({{{p + "input_layernorm.weight", {h}}}, &l.input_norm});
    if (fused) {
      slots.push_back({{{p + "self_attn.qkv_proj.weight", {q_rows + 2 * kv_rows, h}}}, &l.qkv});
    } else {
      slots.push_back({{{p + "self_attn.q_proj.weight", {q_rows, h}},
                        {p + "self_attn.k_proj.weight", {kv_rows, h}},
                        {p + "self_attn.v_proj.weight", {kv_rows, h}}},
                       &l.qkv});
    }
    if (c.qkv_bias) {
      slots.push_back({{{p + "self_attn.q_proj.bias", {q_rows}},
                        {p + "self_attn.k_proj.bias", {kv_rows}},
                        {p + "self_attn.v_proj.bias", {kv_rows}}},
                       &l.qkv_bias});
    }
    slots.push_back({{{p + "self_attn.o_proj.weight", {h, q_rows}}}, &l.o_proj});
    if (c.o_proj_bias) slots.push_back({{{p + "self_attn.o_proj.bias", {h}}}, &l.o_proj_bias});
    if (c.qk_norm) {
      slots.push_back({{{p + "self_attn.q_norm.weight", {d}}}, &l.q_norm});
      slots.push_back({{{p + "self_attn.k_norm.weight", {d}}}, &l.k_norm});
    }
    if (c.sandwich_norms) {  // Gemma
      slots.push_back({{{p + "post_attention_layernorm.weight", {h}}}, &l.attn_output_norm});
      slots.push_back({{{p + "pre_feedforward_layernorm.weight", {h}}}, &l.mlp_input_norm});
      slots.push_back({{{p + "post_feedforward_layernorm.weight", {h}}}, &l.mlp_output_norm});
    } else {
      slots.push_back({{{p + "post_attention_layernorm.weight", {h}}}, &l.mlp_input_norm});
    }
    if (fused) {
      slots.push_back({{{p + "mlp.gate_up_proj.weight", {2 * inter, h}}}, &l.gate_up});
    } else {
      slots.push_back(
          {{{p + "mlp.gate_proj.weight", {inter, h}}, {p + "mlp.up_proj.weight", {inter, h}}},
           &l.gate_up});
    }
    slots.push_back({{{p + "mlp.down_proj.weight", {h, inter}}}, &l.down});
  }
  slots.push_back({{{"model.norm.weight", {h}}}, &w.final_norm});
  if (!c.tie_word_embeddings) {
    slots.push_back({{{"lm_head.weight", {c.vocab_size, h}}}, &w.lm_head});
  }
  return slots;
}

// Allocates the storage and points every slot (and part) into it.
// `fill(part, dst)` then writes one source tensor.
absl::StatusOr<DeviceWeights> Build(
    const ModelConfig& c, ElemType dtype,
    const std::function<absl::Status(const Part&, void* dst)>& fill) {
  DeviceWeights w;
  w.dtype = dtype;
  std::vector<Slot> slots = Layout(c, w);
  Carver counter;
  for (const Slot& s : slots) {
    int64_t n = 0;
    for (const Part& p : s.parts) n += Elements(p.shape);
    counter.TakeBytes(n * ElemSize(dtype));
  }
  auto storage = DeviceBuffer::Allocate(counter.used(), "model weights");
  if (!storage.ok()) return storage.status();
  w.storage = std::move(*storage);
  Carver carver(w.storage.get());
  for (Slot& s : slots) {
    int64_t n = 0;
    for (const Part& p : s.parts) n += Elements(p.shape);
    char* base = static_cast<char*>(carver.TakeBytes(n * ElemSize(dtype)));
    *s.dst = base;
    if (s.streamed) w.streamed_bytes += n * static_cast<int64_t>(ElemSize(dtype));
    for (const Part& p : s.parts) {
      KVSERVE_RETURN_IF_ERROR(fill(p, base));
      base += Elements(p.shape) * ElemSize(dtype);
    }
  }
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed_tokens;
    w.streamed_bytes += c.vocab_size * c.hidden_size * static_cast<int64_t>(ElemSize(dtype));
  }
  KVSERVE_RETURN_IF_CUDA_ERROR(cudaDeviceSynchronize(), "uploading the model weights");
  return w;
}

}  // namespace

ElemType ElemTypeOf(DType t) {
  switch (t) {
    case DType::kF32:
      return ElemType::kF32;
    case DType::kF16:
      return ElemType::kF16;
    case DType::kBF16:
      return ElemType::kBF16;
  }
  return ElemType::kF32;
}

absl::StatusOr<DeviceWeights> UploadWeights(const ModelConfig& config,
                                            const SafetensorsCheckpoint& checkpoint,
                                            ElemType dtype) {
  // Conversions go through a bounded staging buffer: 64 Mi source bytes.
  constexpr int64_t kStagingBytes = int64_t{64} << 20;
  auto staging = DeviceBuffer::Allocate(kStagingBytes, "weight conversion staging");
  if (!staging.ok()) return staging.status();
  auto fill = [&](const Part& part, void* dst) -> absl::Status {
    auto info = checkpoint.Find(part.name);
    if (!info.ok()) return info.status();
    const TensorInfo& t = **info;
    if (t.shape != part.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor \"", part.name, "\" in ", t.file, " has shape [", absl::StrJoin(t.shape, ", "),
          "], expected [", absl::StrJoin(part.shape, ", "), "]"));
    }
    const ElemType src_type = ElemTypeOf(t.dtype);
    const int64_t n = Elements(part.shape);
    if (src_type == dtype) {
      KVSERVE_RETURN_IF_CUDA_ERROR(
          cudaMemcpy(dst, t.data, n * ElemSize(dtype), cudaMemcpyHostToDevice),
          absl::StrCat("uploading tensor ", part.name));
      checkpoint.Release(part.name);  // a GGUF's dequantized copy is freed here
      return absl::OkStatus();
    }
    const int64_t chunk = kStagingBytes / static_cast<int64_t>(ElemSize(src_type));
    for (int64_t begin = 0; begin < n; begin += chunk) {
      const int64_t count = std::min(chunk, n - begin);
      KVSERVE_RETURN_IF_CUDA_ERROR(cudaMemcpy(staging->get(), t.data + begin * ElemSize(src_type),
                                              count * ElemSize(src_type), cudaMemcpyHostToDevice),
                                   absl::StrCat("uploading tensor ", part.name));
      void* out = static_cast<char*>(dst) + begin * ElemSize(dtype);
      const cudaError_t err =
          src_type == ElemType::kF32
              ? kernels::cuda::ConvertFromF32(static_cast<const float*>(staging->get()), out, dtype,
                                              count, nullptr)
              : kernels::cuda::ConvertElems(staging->get(), src_type, out, dtype, count, nullptr);
      KVSERVE_RETURN_IF_CUDA_ERROR(err, absl::StrCat("converting tensor ", part.name));
      // The staging buffer is reused by the next chunk.
      KVSERVE_RETURN_IF_CUDA_ERROR(cudaDeviceSynchronize(),
                                   absl::StrCat("converting tensor ", part.name));
    }
    checkpoint.Release(part.name);
    return absl::OkStatus();
  };
  return Build(config, dtype, fill);
}

absl::StatusOr<DeviceWeights> GenerateBuiltinWeights(const ModelConfig& config, uint64_t seed,
                                                     ElemType dtype) {
  std::map<std::string, BuiltinTensorSpec> specs;
  for (BuiltinTensorSpec& s : BuiltinTensorSpecs(config)) specs.emplace(s.name, std::move(s));
  auto fill = [&](const Part& part, void* dst) -> absl::Status {
    auto it = specs.find(part.name);
    if (it == specs.end()) {
      return absl::NotFoundError(absl::StrCat("builtin model has no tensor \"", part.name, "\""));
    }
    const BuiltinTensorSpec& s = it->second;
    KVSERVE_RETURN_IF_CUDA_ERROR(
        kernels::cuda::FillHashUniform(dst, dtype, Elements(part.shape), seed, s.index, s.scale,
                                       s.offset, nullptr),
        absl::StrCat("generating tensor ", part.name));
    return absl::OkStatus();
  };
  return Build(config, dtype, fill);
}

}  // namespace kvserve::engine::cuda
