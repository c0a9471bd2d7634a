// Model: everything immutable about a loaded model: config, packed weights,
// rotary frequencies and tokenizer. Shared read-only by ModelRunners.
#pragma once

#include <memory>
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
  std::vector<float> rope_inv_freq;      // [head_dim / 2]
  std::unique_ptr<Tokenizer> tokenizer;  // null when the checkpoint ships none
};

// `spec` is "builtin:NAME" or a Hugging Face checkpoint directory (config.json,
// *.safetensors, and tokenizer.json or tokenizer.model).
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& spec);

}  // namespace kvserve::engine
