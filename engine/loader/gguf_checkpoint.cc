// A GGUF's tensors as a SafetensorsCheckpoint under transformers' names
// (gguf.h: the name table and the two transforms undone here).
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/loader/gguf.h"
#include "engine/loader/gguf_dequant.h"

namespace kvserve::engine {
namespace {

// One served tensor: where it is in the file and what to undo.
struct Source {
  const GgufTensor* tensor = nullptr;
  int64_t unpermute_heads = 0;  // > 0: llama's q/k row permutation, over this many heads
  bool minus_one = false;       // Gemma norms stored as 1 + w
};

// blk.N.<suffix> -> model.layers.N.<transformers suffix>.
std::string LayerSuffix(std::string_view gguf, const ModelConfig& c) {
  const bool gemma = c.norm_weight_plus_one;
  const bool phi3 = c.model_type == "phi3";
  if (gguf == "attn_norm") return "input_layernorm";
  if (gguf == "attn_q") return "self_attn.q_proj";
  if (gguf == "attn_k") return "self_attn.k_proj";
  if (gguf == "attn_v") return "self_attn.v_proj";
  if (gguf == "attn_qkv" && phi3) return "self_attn.qkv_proj";
  if (gguf == "attn_output") return "self_attn.o_proj";
  if (gguf == "attn_q_norm") return "self_attn.q_norm";
  if (gguf == "attn_k_norm") return "self_attn.k_norm";
  if (gguf == "ffn_gate") return "mlp.gate_proj";
  if (gguf == "ffn_up") return phi3 ? "mlp.gate_up_proj" : "mlp.up_proj";
  if (gguf == "ffn_down") return "mlp.down_proj";
  if (gguf == "ffn_norm") return gemma ? "pre_feedforward_layernorm" : "post_attention_layernorm";
  if (gguf == "post_attention_norm" && gemma) return "post_attention_layernorm";
  if (gguf == "post_ffw_norm" && gemma) return "post_feedforward_layernorm";
  return "";
}

// The transformers name of a GGUF tensor, or "" for one kvserve does not map.
std::string TransformersName(const std::string& gguf, const ModelConfig& c) {
  if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf == "output_norm.weight") return "model.norm.weight";
  if (gguf == "output.weight") return "lm_head.weight";
  std::vector<std::string> parts = absl::StrSplit(gguf, '.');
  int64_t layer = 0;
  if (parts.size() != 4 || parts[0] != "blk" || !absl::SimpleAtoi(parts[1], &layer) ||
      (parts[3] != "weight" && parts[3] != "bias")) {
    return "";
  }
  const std::string suffix = LayerSuffix(parts[2], c);
  if (suffix.empty()) return "";
  return absl::StrCat("model.layers.", layer, ".", suffix, ".", parts[3]);
}

// Within each head of 2h rows, source row 2i + a goes to row a * h + i.
void UnpermuteRows(int64_t heads, int64_t row_length, std::vector<float>& values) {
  const int64_t rows = static_cast<int64_t>(values.size()) / row_length;
  const int64_t half = rows / heads / 2;
  std::vector<float> out(values.size());
  for (int64_t head = 0; head < heads; ++head) {
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t from = head * 2 * half + 2 * i + a;
        const int64_t to = head * 2 * half + a * half + i;
        std::copy_n(values.begin() + from * row_length, row_length, out.begin() + to * row_length);
      }
    }
  }
  values = std::move(out);
}

class GgufCheckpoint final : public SafetensorsCheckpoint {
 public:
  GgufCheckpoint(std::shared_ptr<const GgufFile> file, const ModelConfig& c)
      : file_(std::move(file)) {
    const bool llama = c.model_type == "llama" || c.model_type == "mistral";
    for (const GgufTensor& t : file_->tensors()) {
      const std::string name = TransformersName(t.name, c);
      if (name.empty()) continue;
      Source s{.tensor = &t};
      if (llama && absl::StrContains(name, ".self_attn.q_proj.")) s.unpermute_heads = c.num_heads;
      if (llama && absl::StrContains(name, ".self_attn.k_proj.")) {
        s.unpermute_heads = c.num_kv_heads;
      }
      s.minus_one = c.norm_weight_plus_one && absl::EndsWith(name, "norm.weight");
      sources_.emplace(name, s);
    }
  }

  absl::StatusOr<const TensorInfo*> Find(std::string_view name) const override {
    auto source = sources_.find(name);
    if (source == sources_.end()) {
      return absl::NotFoundError(
          absl::StrCat("tensor \"", std::string(name), "\" not found in ", file_->source()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = loaded_.find(source->first);
    if (it != loaded_.end()) return &it->second->info;
    absl::StatusOr<std::unique_ptr<Loaded>> loaded = Load(source->first, source->second);
    if (!loaded.ok()) return loaded.status();
    return &loaded_.emplace(source->first, *std::move(loaded)).first->second->info;
  }
  bool Contains(std::string_view name) const override { return sources_.contains(name); }
  std::vector<std::string> TensorNames() const override {
    std::vector<std::string> names;
    for (const auto& entry : sources_) names.push_back(entry.first);
    return names;
  }
  // Frees the dequantized copy (found again, it is dequantized again).
  void Release(std::string_view name) const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = loaded_.find(name);
    if (it != loaded_.end()) loaded_.erase(it);
  }

 private:
  struct Loaded {
    std::vector<float> values;
    TensorInfo info;
  };

  absl::StatusOr<std::unique_ptr<Loaded>> Load(const std::string& name, const Source& s) const {
    const GgufTensor& t = *s.tensor;
    auto loaded = std::make_unique<Loaded>();
    loaded->values.resize(static_cast<size_t>(t.num_elements));
    if (absl::Status st =
            DequantizeGgml(t.type, t.data, t.num_bytes, t.num_elements, loaded->values.data());
        !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_->source(), ": tensor \"", t.name, "\": ", st.message()));
    }
    if (s.unpermute_heads > 0) {
      const int64_t rows = t.ne.size() == 1 ? t.ne[0] : t.ne[1];
      const int64_t row_length = t.ne.size() == 1 ? 1 : t.ne[0];
      if (t.ne.size() > 2 || rows % (2 * s.unpermute_heads) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(file_->source(), ": tensor \"", t.name, "\" has ", rows,
                         " rows, not a multiple of 2 x ", s.unpermute_heads, " heads"));
      }
      UnpermuteRows(s.unpermute_heads, row_length, loaded->values);
    }
    if (s.minus_one) {
      for (float& v : loaded->values) v -= 1.0f;
    }
    TensorInfo& info = loaded->info;
    info.name = name;
    info.file = file_->source();
    info.dtype = DType::kF32;
    info.shape.assign(t.ne.rbegin(), t.ne.rend());  // row-major: ne reversed
    info.data = reinterpret_cast<const uint8_t*>(loaded->values.data());
    info.num_bytes = loaded->values.size() * sizeof(float);
    return loaded;
  }

  std::shared_ptr<const GgufFile> file_;
  std::map<std::string, Source, std::less<>> sources_;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::unique_ptr<Loaded>, std::less<>> loaded_;
};

}  // namespace

std::unique_ptr<SafetensorsCheckpoint> MakeGgufCheckpoint(std::shared_ptr<const GgufFile> file,
                                                          const ModelConfig& config) {
  return std::make_unique<GgufCheckpoint>(std::move(file), config);
}

}  // namespace kvserve::engine
