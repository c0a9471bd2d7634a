// GenerationConfig: what a checkpoint's generation_config.json says about
// generating from it, as far as a server honours it.
//
//   eos_token_id        int or list: extra ids that end generation (instruct
//                       checkpoints list end-of-turn tokens here, e.g. Llama 3
//                       Instruct's <|eot_id|>). LoadModel merges them into
//                       ModelConfig::eos_token_ids after config.json's own, so
//                       a request stops where transformers' generate() stops.
//   temperature, top_p, top_k, min_p, repetition_penalty
//                       the checkpoint's default sampling parameters. The
//                       server applies them to the fields a request leaves
//                       unset, unless --generation_config=none (vLLM's
//                       `--generation-config auto|vllm`).
//
// As in vLLM, only values that differ from transformers' GenerationConfig
// defaults count as the checkpoint's (temperature 1.0, top_p 1.0, top_k 50,
// min_p null, repetition_penalty 1.0): a file that merely restates
// transformers' top_k = 50 does not turn top-k on. `do_sample` is not read:
// a server's greedy/sampling choice is the request's temperature.
// Everything else in the file (max_length, pad_token_id, ...) is ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace kvserve::engine {

// Sampling values a checkpoint sets; nullopt where it sets none.
struct SamplingDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;

  bool empty() const { return !temperature && !top_p && !top_k && !min_p && !repetition_penalty; }
};

struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;
  SamplingDefaults sampling;
};

// `source` names the file in error messages. Wrong types and values outside
// the ranges a request may use are InvalidArgument naming the field.
absl::StatusOr<GenerationConfig> ParseGenerationConfig(const nlohmann::json& json,
                                                       std::string_view source);
// Reads <dir>/generation_config.json; an empty GenerationConfig when the file
// is absent.
absl::StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& model_dir);

// `ids` followed by those of `extra` not already in it, in order.
std::vector<int32_t> MergeEosTokenIds(std::vector<int32_t> ids, const std::vector<int32_t>& extra);

}  // namespace kvserve::engine
