// Builtin models: decoder models whose weights are a pure function of a
// seed, with the byte-level tokenizer, so kvserve serves with no files.
//
//   builtin:tiny   2 layers, hidden 64, 4 heads / 2 KV heads (GQA): every test
//   builtin:tiny-qwen3, tiny-phi3, tiny-gemma2, tiny-gemma3
//                  builtin:tiny's shape with each of those families' features
//                  (q/k norms; fused qkv and gate_up tensors, partial rotary,
//                  longrope, sliding window; GeGLU, sandwich norms, soft-capping,
//                  alternating sliding/global layers, local rope), for the
//                  invariance tests. CPU only (the CUDA runner rejects them).
//   builtin:small  30 layers, hidden 576, 9 heads / 3 KV heads, MLP 1536 (the
//                  SmolLM-135M shape with a 258-token vocabulary, ~106M
//                  parameters): benchmarks
//   builtin:small-49k  builtin:small with SmolLM-135M's 49152-token vocabulary
//                  (tied; ~134M parameters): weight-format benchmarks
//   builtin:medium-152k  the Qwen2.5-0.5B shape as a Llama without q/k/v bias
//                  (24 layers, hidden 896, 14 / 2 heads, MLP 4864, vocabulary
//                  151936 tied; ~494M parameters): the larger CPU benchmark
//   builtin:llama3-8b  the Meta-Llama-3-8B shape (32 layers, hidden 4096,
//                  32 / 8 heads, MLP 14336, vocabulary 128256, llama3 rope,
//                  untied lm_head; 8.0B parameters): GPU benchmarks only.
//                  Device-only: its weights are generated on the GPU by the
//                  same hash (kernels/cuda FillHashUniform), never on the host.
//
// The weights are random, so the text they generate is noise; they exercise
// exactly the code a real checkpoint does (they are read through the same
// SafetensorsCheckpoint interface and LoadWeights).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/loader/model_config.h"
#include "engine/loader/safetensors.h"

namespace kvserve::engine {

inline constexpr uint64_t kBuiltinSeed = 0x6b7673657276ULL;  // "kvserv"

// One generated tensor: element i is offset + scale * HashUniform(seed, index, i)
// (HashUniform: uniform in [-1, 1) from SplitMix64, builtin_models.cc).
struct BuiltinTensorSpec {
  std::string name;  // transformers name
  std::vector<int64_t> shape;
  uint64_t index = 0;  // the tensor's number, which keys the hash
  float scale = 1.0f;
  float offset = 0.0f;
};

// Every tensor of a builtin model, in index order.
std::vector<BuiltinTensorSpec> BuiltinTensorSpecs(const ModelConfig& config);

// A builtin too large to generate on the host (served by the CUDA backend only).
bool IsDeviceOnlyBuiltin(std::string_view name);

// NotFound listing the builtin names for an unknown one.
absl::StatusOr<ModelConfig> BuiltinModelConfig(std::string_view name);

// A checkpoint whose tensors (transformers names, fp32) are generated from
// `seed`: element i of tensor t is a counter-based hash of (seed, t, i), so
// generation order and thread count do not matter.
//
// dtype kBF16 / kF16: every tensor holds the fp32 value rounded to nearest
// even in that format, generated straight into 16-bit storage (no fp32 copy
// of the model exists). These are other models than the fp32 one: a 16-bit
// checkpoint, as Hugging Face ships most.
std::unique_ptr<SafetensorsCheckpoint> MakeBuiltinCheckpoint(const ModelConfig& config,
                                                             uint64_t seed,
                                                             DType dtype = DType::kF32);

}  // namespace kvserve::engine
