#include "engine/model.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "engine/builtin_models.h"
#include "engine/gguf_model.h"
#include "engine/loader/safetensors.h"

namespace kvserve::engine {
namespace {

constexpr char kBuiltinPrefix[] = "builtin:";

// Validates the config and computes the rotary tables.
absl::Status PrepareRope(Model& model, const LoadModelOptions& options) {
  KVSERVE_RETURN_IF_ERROR(model.config.Validate());
  model.rope_inv_freq = ComputeRopeInvFreq(model.config, options.max_model_len);
  model.local_rope_inv_freq = ComputeLocalRopeInvFreq(model.config);
  model.rope_attention_scaling = RopeAttentionScaling(model.config);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> Finish(std::unique_ptr<Model> model,
                                              const SafetensorsCheckpoint& checkpoint,
                                              const LoadModelOptions& options) {
  KVSERVE_RETURN_IF_ERROR(PrepareRope(*model, options));
  KVSERVE_ASSIGN_OR_RETURN(model->weights, LoadWeights(model->config, checkpoint, options.weights));
  return model;
}

// Merges generation_config.json into the model: its EOS ids always, its
// sampling values when asked. The values must be ones a request could send.
absl::Status ApplyGenerationConfig(const std::string& dir, const LoadModelOptions& options,
                                   Model& model) {
  auto generation = LoadGenerationConfig(dir);
  if (!generation.ok()) return generation.status();
  model.config.eos_token_ids =
      MergeEosTokenIds(std::move(model.config.eos_token_ids), generation->eos_token_ids);
  if (absl::Status s = model.config.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, "/generation_config.json: ", s.message()));
  }
  if (!options.generation_sampling_defaults) return absl::OkStatus();
  SamplingParams check;
  ApplySamplingDefaults(generation->sampling, check);
  if (absl::Status s = check.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, "/generation_config.json: ", s.message(),
                     " (--generation_config=none serves the model without its sampling defaults)"));
  }
  model.sampling_defaults = generation->sampling;
  return absl::OkStatus();
}

// Packs the weights of model->checkpoint, then closes it.
absl::StatusOr<std::unique_ptr<Model>> FinishWithCheckpoint(std::unique_ptr<Model> model,
                                                            const LoadModelOptions& options) {
  const SafetensorsCheckpoint& opened = *model->checkpoint;  // owned by *model, which Finish keeps
  auto finished = Finish(std::move(model), opened, options);
  // The CPU runner reads only the packed weights: unmap the checkpoint, whose
  // pages the packing touched and which would otherwise stay in the RSS.
  if (finished.ok()) (*finished)->checkpoint.reset();
  return finished;
}

// A GGUF file: config, tokenizer and chat template from its metadata; no
// generation_config (a GGUF has no sampling defaults).
absl::StatusOr<std::unique_ptr<Model>> LoadGguf(std::unique_ptr<Model> model,
                                                const LoadModelOptions& options) {
  KVSERVE_ASSIGN_OR_RETURN(GgufModelParts parts, OpenGgufModel(model->name));
  model->checkpoint_format = "gguf";
  model->config = std::move(parts.config);
  model->checkpoint = std::move(parts.checkpoint);
  model->tokenizer = std::move(parts.tokenizer);
  model->chat_template = std::move(parts.chat_template);
  if (model->tokenizer == nullptr) {
    Log().warn("{}: no tokenizer.ggml.model; only token-id prompts work", model->name);
  }
  if (!options.host_weights) {
    KVSERVE_RETURN_IF_ERROR(PrepareRope(*model, options));
    return model;
  }
  return FinishWithCheckpoint(std::move(model), options);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadBuiltinModel(std::string_view name,
                                                        DType checkpoint_dtype,
                                                        const LoadModelOptions& options) {
  auto model = std::make_unique<Model>();
  model->name = absl::StrCat(kBuiltinPrefix, std::string(name));
  model->checkpoint_format = "builtin";
  auto config = BuiltinModelConfig(name);
  if (!config.ok()) return config.status();
  model->config = *config;
  model->tokenizer = MakeByteTokenizer();
  model->builtin_seed = kBuiltinSeed;
  if (!options.host_weights) {
    KVSERVE_RETURN_IF_ERROR(PrepareRope(*model, options));
    return model;
  }
  if (IsDeviceOnlyBuiltin(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model \"", model->name,
                     "\" is GPU-only: its host weights would not fit in memory; serve it with "
                     "--backend=cuda"));
  }
  // Transient: freed once the weights are packed.
  auto checkpoint = MakeBuiltinCheckpoint(model->config, kBuiltinSeed, checkpoint_dtype);
  return Finish(std::move(model), *checkpoint, options);
}

void ApplySamplingDefaults(const SamplingDefaults& defaults, SamplingParams& params) {
  if (defaults.temperature) params.temperature = *defaults.temperature;
  if (defaults.top_p) params.top_p = *defaults.top_p;
  if (defaults.top_k) params.top_k = *defaults.top_k;
  if (defaults.min_p) params.min_p = *defaults.min_p;
  if (defaults.repetition_penalty) params.repetition_penalty = *defaults.repetition_penalty;
}

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& spec,
                                                 const LoadModelOptions& options) {
  if (options.weights.matmul_precision != MatmulPrecision::kFloat32 &&
      options.weights.quantization != Quantization::kNone) {
    return absl::InvalidArgumentError(
        "a bfloat16 matmul precision multiplies bf16 weights: it cannot be combined with "
        "quantization");
  }
  if (absl::StartsWith(spec, kBuiltinPrefix)) {
    const WeightDtype d = options.weights.dtype;
    const DType generated = d == WeightDtype::kBfloat16  ? DType::kBF16
                            : d == WeightDtype::kFloat16 ? DType::kF16
                                                         : DType::kF32;
    return LoadBuiltinModel(spec.substr(sizeof(kBuiltinPrefix) - 1), generated, options);
  }
  auto model = std::make_unique<Model>();
  model->name = spec;
  if (IsGgufPath(spec)) return LoadGguf(std::move(model), options);

  namespace fs = std::filesystem;
  if (!fs::is_directory(spec)) {
    return absl::NotFoundError(
        absl::StrCat("model \"", spec, "\" is neither builtin:NAME nor a checkpoint directory"));
  }
  model->checkpoint_format = "safetensors";
  KVSERVE_ASSIGN_OR_RETURN(model->config, LoadModelConfig(spec));
  KVSERVE_RETURN_IF_ERROR(ApplyGenerationConfig(spec, options, *model));
  auto checkpoint = SafetensorsCheckpoint::Open(spec);
  if (!checkpoint.ok()) return checkpoint.status();
  if (fs::exists(fs::path(spec) / "tokenizer.json") ||
      fs::exists(fs::path(spec) / "tokenizer.model")) {
    KVSERVE_ASSIGN_OR_RETURN(model->tokenizer, LoadTokenizer(spec));
  } else {
    Log().warn("{}: no tokenizer.json or tokenizer.model; only token-id prompts work", spec);
  }
  model->checkpoint = std::move(*checkpoint);
  if (!options.host_weights) {
    KVSERVE_RETURN_IF_ERROR(PrepareRope(*model, options));
    return model;
  }
  return FinishWithCheckpoint(std::move(model), options);
}

}  // namespace kvserve::engine
