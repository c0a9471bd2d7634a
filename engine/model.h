// Model: everything immutable about a loaded model: config, packed weights,
// rotary frequencies and tokenizer. Shared read-only by ModelRunners.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/loader/generation_config.h"
#include "engine/loader/model_config.h"
#include "engine/model_weights.h"
#include "engine/sampling/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve::engine {

// A chat template the model file carries itself (a GGUF's
// tokenizer.chat_template), with the special tokens' text it may name.
struct EmbeddedChatTemplate {
  std::string source;
  std::string bos_token;  // "" when the file names none
  std::string eos_token;
};

struct Model {
  std::string name;  // "builtin:tiny", the checkpoint directory or the .gguf file
  // "builtin", "safetensors" or "gguf" (GetModelInfo's checkpoint_format).
  std::string checkpoint_format;
  // Set for a GGUF with tokenizer.chat_template; a checkpoint directory's
  // template files are found by chat::ChatTemplate::FromCheckpoint instead.
  std::optional<EmbeddedChatTemplate> chat_template;
  // eos_token_ids: config.json's, then generation_config.json's (merged).
  ModelConfig config;
  // generation_config.json's sampling values, applied by the server to the
  // fields a request leaves unset; empty with
  // LoadModelOptions::generation_sampling_defaults = false.
  SamplingDefaults sampling_defaults;
  ModelWeights weights;
  std::vector<float> rope_inv_freq;  // [RotaryDim() / 2]
  // Gemma 3 sliding layers' rope (ComputeLocalRopeInvFreq); empty otherwise.
  std::vector<float> local_rope_inv_freq;
  float rope_attention_scaling = 1.0f;   // on cos and sin (longrope), global rope only
  std::unique_ptr<Tokenizer> tokenizer;  // null when the checkpoint ships none

  // Where a GPU runner takes its weights from: the opened (memory-mapped)
  // checkpoint of a directory, or the seed of a builtin model's generated
  // weights. With host_weights = false, `weights` stays empty; with
  // host_weights = true the checkpoint is closed once packed (null here).
  std::unique_ptr<SafetensorsCheckpoint> checkpoint;
  std::optional<uint64_t> builtin_seed;
};

struct LoadModelOptions {
  // false: skip the CPU runner's packed weights (keeps the checkpoint
  // open instead). Device-only builtins (builtin:llama3-8b) need false.
  bool host_weights = true;
  // How the CPU runner stores the weights (model_weights.h). A builtin model
  // with dtype bfloat16 / float16 is generated as a 16-bit checkpoint
  // (MakeBuiltinCheckpoint); auto and float32 generate the fp32 one.
  WeightOptions weights;
  // false: ignore generation_config.json's sampling values (its EOS ids are
  // merged either way: they are part of the model, as in generate()).
  bool generation_sampling_defaults = true;
  // The longest sequence this model will serve (0: max_position_embeddings).
  // Only longrope (Phi-3) depends on it: long factors iff it exceeds
  // original_max_position_embeddings (see ComputeRopeInvFreq).
  int64_t max_model_len = 0;
};

// `spec` is "builtin:NAME", a Hugging Face checkpoint directory (config.json,
// *.safetensors, tokenizer.json or tokenizer.model, and optionally
// generation_config.json), or a GGUF file (*.gguf: engine/gguf_model.h;
// its weights are dequantized to fp32 at load, then stored as
// options.weights says).
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& spec,
                                                 const LoadModelOptions& options = {});

// builtin:NAME generated as a `checkpoint_dtype` checkpoint whatever
// options.weights says (tests: one checkpoint, several weight formats).
absl::StatusOr<std::unique_ptr<Model>> LoadBuiltinModel(std::string_view name,
                                                        DType checkpoint_dtype,
                                                        const LoadModelOptions& options = {});

// Sets in `params` every value `defaults` holds (the caller decides which
// request fields were unset).
void ApplySamplingDefaults(const SamplingDefaults& defaults, SamplingParams& params);

}  // namespace kvserve::engine
