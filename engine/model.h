// Model: everything immutable about a loaded model: config, packed weights,
// rotary frequencies and tokenizer. Shared read-only by ModelRunners.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/loader/model_config.h"
#include "engine/model_weights.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve::engine {

struct Model {
  std::string name;  // "builtin:tiny", or the checkpoint directory
  ModelConfig config;
  ModelWeights weights;
  std::vector<float> rope_inv_freq;  // [RotaryDim() / 2]
  // Gemma 3 sliding layers' rope (ComputeLocalRopeInvFreq); empty otherwise.
  std::vector<float> local_rope_inv_freq;
  float rope_attention_scaling = 1.0f;   // on cos and sin (longrope), global rope only
  std::unique_ptr<Tokenizer> tokenizer;  // null when the checkpoint ships none

  // Where a GPU runner takes its weights from: the opened (memory-mapped)
  // checkpoint of a directory, or the seed of a builtin model's generated
  // weights. With host_weights = false, `weights` stays empty.
  std::unique_ptr<SafetensorsCheckpoint> checkpoint;
  std::optional<uint64_t> builtin_seed;
};

struct LoadModelOptions {
  // false: skip the CPU runner's fp32 packed weights (keeps the checkpoint
  // open instead). Device-only builtins (builtin:llama3-8b) need false.
  bool host_weights = true;
  // The longest sequence this model will serve (0: max_position_embeddings).
  // Only longrope (Phi-3) depends on it: long factors iff it exceeds
  // original_max_position_embeddings (see ComputeRopeInvFreq).
  int64_t max_model_len = 0;
};

// `spec` is "builtin:NAME" or a Hugging Face checkpoint directory (config.json,
// *.safetensors, and tokenizer.json or tokenizer.model).
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& spec,
                                                 const LoadModelOptions& options = {});

}  // namespace kvserve::engine
