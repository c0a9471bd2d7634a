// Builtin models: Llama-shaped models whose weights are a pure function of a
// seed, with the byte-level tokenizer, so kvserve serves with no files.
//
//   builtin:tiny   2 layers, hidden 64, 4 heads / 2 KV heads (GQA): every test
//   builtin:small  30 layers, hidden 576, 9 heads / 3 KV heads, MLP 1536 (the
//                  SmolLM-135M shape with a 258-token vocabulary, ~106M
//                  parameters): benchmarks
//
// The weights are random, so the text they generate is noise; they exercise
// exactly the code a real checkpoint does (they are read through the same
// SafetensorsCheckpoint interface and LoadWeights).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/loader/model_config.h"
#include "engine/loader/safetensors.h"

namespace kvserve::engine {

inline constexpr uint64_t kBuiltinSeed = 0x6b7673657276ULL;  // "kvserv"

// NotFound listing the builtin names for an unknown one.
absl::StatusOr<ModelConfig> BuiltinModelConfig(std::string_view name);

// A checkpoint whose tensors (transformers names, fp32) are generated from
// `seed`: element i of tensor t is a counter-based hash of (seed, t, i), so
// generation order and thread count do not matter.
std::unique_ptr<SafetensorsCheckpoint> MakeBuiltinCheckpoint(const ModelConfig& config,
                                                             uint64_t seed);

}  // namespace kvserve::engine
