#include "engine/builtin_models.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::engine {
namespace {

ModelConfig ByteLevelLlama() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = 258;  // bytes + <bos> + <eos>, as MakeByteTokenizer
  c.bos_token_id = 256;
  c.eos_token_ids = {257};
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 2048;
  c.tie_word_embeddings = true;
  return c;
}

// builtin:tiny: 2 layers, hidden 64, 4 query / 2 KV heads of 16.
ModelConfig TinyLlama() {
  ModelConfig c = ByteLevelLlama();
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  return c;
}

constexpr char kTinyFamilies[] = "tiny-qwen3, tiny-phi3, tiny-gemma2, tiny-gemma3";

// builtin:tiny's shape (2 layers, hidden 64, 4 / 2 heads of 16) with each new
// family's features switched on, so the invariance tests run every code path
// of the runner. Sliding windows (24, 40) are shorter than the tests' sequences.
absl::StatusOr<ModelConfig> TinyOfFamily(std::string_view name) {
  ModelConfig c = TinyLlama();
  if (name == "tiny-qwen3") {
    c.architecture = "Qwen3ForCausalLM";
    c.model_type = "qwen3";
    c.qk_norm = true;
    c.rope_theta = 1e6;
  } else if (name == "tiny-phi3") {
    // Partial rotary (8 of 16 dims) with longrope; served up to 2048 > 64
    // tokens, so the long factors and attention_factor apply.
    c.architecture = "Phi3ForCausalLM";
    c.model_type = "phi3";
    c.tie_word_embeddings = false;
    c.partial_rotary_factor = 0.5;
    c.sliding_window = 40;
    c.rope_scaling.type = RopeScaling::Type::kLongRope;
    c.rope_scaling.original_max_position_embeddings = 64;
    c.rope_scaling.short_factor = {1.0, 1.2, 1.9, 3.1};
    c.rope_scaling.long_factor = {1.1, 2.5, 7.0, 19.0};
    c.rope_scaling.factor = 2048.0 / 64.0;
    c.rope_scaling.attention_factor = std::sqrt(1.0 + std::log(32.0) / std::log(64.0));
  } else if (name == "tiny-gemma2" || name == "tiny-gemma3") {
    const bool gemma3 = name == "tiny-gemma3";
    c.architecture = gemma3 ? "Gemma3ForCausalLM" : "Gemma2ForCausalLM";
    c.model_type = gemma3 ? "gemma3_text" : "gemma2";
    c.hidden_act = Activation::kGeluTanh;
    c.norm_weight_plus_one = c.sandwich_norms = c.scale_embeddings = true;
    c.query_pre_attn_scalar = 24.0;
    c.sliding_window = 24;
    if (gemma3) {
      c.num_layers = 3;
      c.sliding_layers = {true, false, true};
      c.qk_norm = true;
      c.rope_theta = 1e6;
      c.rope_scaling.type = RopeScaling::Type::kLinear;
      c.rope_scaling.factor = 2.0;
      c.local_rope_theta = 1e4;
    } else {
      c.sliding_layers = {true, false};
      c.attn_logit_softcapping = 10.0;
      c.final_logit_softcapping = 15.0;
    }
  } else {
    return absl::NotFoundError(absl::StrCat("unknown builtin model \"", std::string(name),
                                            "\" (tiny families: ", kTinyFamilies, ")"));
  }
  return c;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1), a pure function of (seed, tensor, index).
float HashUniform(uint64_t seed, uint64_t tensor, uint64_t index) {
  const uint64_t h = SplitMix64(SplitMix64(seed ^ (tensor * 0x632be59bd9b4e019ULL)) + index);
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ULL << 23) - 1.0);
}

// Tensors are generated when first found and freed when released
// (SafetensorsCheckpoint::Release: LoadWeights releases each once packed),
// so loading holds the packed weights plus about one generated matrix, never
// a generated copy of the whole model.
class BuiltinCheckpoint final : public SafetensorsCheckpoint {
 public:
  BuiltinCheckpoint(const ModelConfig& c, uint64_t seed, DType dtype) : seed_(seed), dtype_(dtype) {
    for (BuiltinTensorSpec& spec : BuiltinTensorSpecs(c)) {
      std::string name = spec.name;
      specs_.emplace(std::move(name), std::move(spec));
    }
  }

  absl::StatusOr<const TensorInfo*> Find(std::string_view name) const override {
    auto spec = specs_.find(std::string(name));
    if (spec == specs_.end()) {
      return absl::NotFoundError(
          absl::StrCat("tensor \"", std::string(name), "\" not found in builtin model"));
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tensors_.find(spec->first);
    if (it == tensors_.end()) it = tensors_.emplace(spec->first, Generate(spec->second)).first;
    return &it->second->info;
  }
  bool Contains(std::string_view name) const override { return specs_.contains(std::string(name)); }
  std::vector<std::string> TensorNames() const override {
    std::vector<std::string> names;
    for (const auto& entry : specs_) names.push_back(entry.first);
    return names;
  }
  void Release(std::string_view name) const override {
    std::lock_guard<std::mutex> lock(mu_);
    tensors_.erase(std::string(name));
  }

 private:
  struct Tensor {
    std::vector<uint8_t> bytes;  // little-endian elements of info.dtype
    TensorInfo info;
  };

  std::unique_ptr<Tensor> Generate(const BuiltinTensorSpec& spec) const {
    const uint64_t tensor_index = spec.index, seed = seed_;
    const float scale = spec.scale, offset = spec.offset;
    const DType dtype = dtype_;
    int64_t count = 1;
    for (int64_t d : spec.shape) count *= d;
    auto t = std::make_unique<Tensor>();
    const size_t elem = dtype == DType::kF32 ? 4 : 2;
    t->bytes.resize(static_cast<size_t>(count) * elem);
    uint8_t* out = t->bytes.data();
    kernels::ThreadPool::Default().ParallelFor(count, 1 << 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float v = offset + scale * HashUniform(seed, tensor_index, static_cast<uint64_t>(i));
        if (dtype == DType::kF32) {
          std::memcpy(out + i * 4, &v, 4);
        } else {
          const uint16_t h =
              dtype == DType::kBF16 ? kernels::FloatToBf16(v) : kernels::FloatToHalf(v);
          std::memcpy(out + i * 2, &h, 2);
        }
      }
    });
    t->info = TensorInfo{.name = spec.name,
                         .file = "builtin",
                         .dtype = dtype,
                         .shape = spec.shape,
                         .data = t->bytes.data(),
                         .num_bytes = t->bytes.size()};
    return t;
  }

  uint64_t seed_;
  DType dtype_;
  std::map<std::string, BuiltinTensorSpec> specs_;
  mutable std::mutex mu_;
  // Generated and not yet released (a TensorInfo stays put until then).
  mutable std::map<std::string, std::unique_ptr<Tensor>> tensors_;
};

}  // namespace

std::vector<BuiltinTensorSpec> BuiltinTensorSpecs(const ModelConfig& c) {
  std::vector<BuiltinTensorSpec> specs;
  const int64_t h = c.hidden_size, d = c.head_dim, inter = c.intermediate_size;
  auto add = [&](std::string name, std::vector<int64_t> shape, float scale, float offset) {
    specs.push_back(BuiltinTensorSpec{.name = std::move(name),
                                      .shape = std::move(shape),
                                      .index = specs.size(),
                                      .scale = scale,
                                      .offset = offset});
  };
  // Linear weights are uniform with unit output variance (scale sqrt(3 / fan_in)),
  // so activations stay O(1) and logits are far from uniform.
  auto linear = [&](std::string name, int64_t rows, int64_t cols) {
    add(std::move(name), {rows, cols}, static_cast<float>(std::sqrt(3.0 / cols)), 0.0f);
  };
  // Norm weights around 1 as the kernel multiplies them (Gemma stores w and
  // multiplies by 1 + w, so its stored weights are around 0).
  const float norm_offset = c.norm_weight_plus_one ? 0.0f : 1.0f;
  auto norm = [&](std::string name, int64_t size) {
    add(std::move(name), {size}, 0.1f, norm_offset);
  };
  // Phi-3 checkpoints fuse q/k/v and gate/up (model_weights.h).
  const bool fused = c.model_type == "phi3";
  add("model.embed_tokens.weight", {c.vocab_size, h}, 1.0f, 0.0f);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    norm(p + "input_layernorm.weight", h);
    if (fused) {
      linear(p + "self_attn.qkv_proj.weight", (c.num_heads + 2 * c.num_kv_heads) * d, h);
    } else {
      linear(p + "self_attn.q_proj.weight", c.num_heads * d, h);
      linear(p + "self_attn.k_proj.weight", c.num_kv_heads * d, h);
      linear(p + "self_attn.v_proj.weight", c.num_kv_heads * d, h);
    }
    if (c.qk_norm) {
      norm(p + "self_attn.q_norm.weight", d);
      norm(p + "self_attn.k_norm.weight", d);
    }
    linear(p + "self_attn.o_proj.weight", h, c.num_heads * d);
    norm(p + "post_attention_layernorm.weight", h);
    if (c.sandwich_norms) {
      norm(p + "pre_feedforward_layernorm.weight", h);
      norm(p + "post_feedforward_layernorm.weight", h);
    }
    if (fused) {
      linear(p + "mlp.gate_up_proj.weight", 2 * inter, h);
    } else {
      linear(p + "mlp.gate_proj.weight", inter, h);
      linear(p + "mlp.up_proj.weight", inter, h);
    }
    linear(p + "mlp.down_proj.weight", h, inter);
  }
  norm("model.norm.weight", h);
  if (!c.tie_word_embeddings) linear("lm_head.weight", c.vocab_size, h);
  return specs;
}

bool IsDeviceOnlyBuiltin(std::string_view name) { return name == "llama3-8b"; }

absl::StatusOr<ModelConfig> BuiltinModelConfig(std::string_view name) {
  if (name == "tiny") return TinyLlama();
  ModelConfig c = ByteLevelLlama();
  if (name == "small" || name == "small-49k") {
    c.hidden_size = 576;
    c.intermediate_size = 1536;
    c.num_layers = 30;
    c.num_heads = 9;
    c.num_kv_heads = 3;
    c.head_dim = 64;
    // SmolLM-135M's vocabulary size (the byte tokenizer only produces ids
    // < 258; ids past it decode to nothing): its lm_head's share of a step.
    if (name == "small-49k") c.vocab_size = 49152;
  } else if (name == "medium-152k") {
    // The Qwen2.5-0.5B shape as a Llama (no q/k/v bias), its 151,936-token
    // vocabulary tied: the larger CPU benchmark shape.
    c.vocab_size = 151936;
    c.hidden_size = 896;
    c.intermediate_size = 4864;
    c.num_layers = 24;
    c.num_heads = 14;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-6;
  } else if (name == "llama3-8b") {
    // The Meta-Llama-3-8B shape (vocabulary included: the byte tokenizer
    // only ever produces ids < 258, and ids past it decode to nothing).
    c.vocab_size = 128256;
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_layers = 32;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.rope_theta = 500000.0;
    c.rope_scaling = RopeScaling{.type = RopeScaling::Type::kLlama3,
                                 .factor = 8.0,
                                 .low_freq_factor = 1.0,
                                 .high_freq_factor = 4.0,
                                 .original_max_position_embeddings = 8192,
                                 .short_factor = {},
                                 .long_factor = {}};
    c.max_position_embeddings = 8192;
    c.tie_word_embeddings = false;
  } else if (name.starts_with("tiny-")) {
    return TinyOfFamily(name);
  } else {
    return absl::NotFoundError(
        absl::StrCat("unknown builtin model \"", std::string(name),
                     "\" (builtin models: tiny, small, small-49k, medium-152k, llama3-8b, ",
                     kTinyFamilies, ")"));
  }
  return c;
}

std::unique_ptr<SafetensorsCheckpoint> MakeBuiltinCheckpoint(const ModelConfig& config,
                                                             uint64_t seed, DType dtype) {
  return std::make_unique<BuiltinCheckpoint>(config, seed, dtype);
}

}  // namespace kvserve::engine
