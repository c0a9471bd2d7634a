// config.json and generation_config.json parsing: any bytes either parse into
// a validated config or give an error; a config that validates also yields
// its rope frequencies (the scaling code reads the fuzzed rope parameters).
#include <cstdint>
#include <string_view>

#include "engine/loader/generation_config.h"
#include "engine/loader/model_config.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvserve::engine::ModelConfig;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;

  absl::StatusOr<ModelConfig> config = kvserve::engine::ParseModelConfig(json, "config.json");
  if (config.ok()) {
    KVSERVE_FUZZ_CHECK(config->num_heads > 0 && config->head_dim > 0, "validated config");
    const auto inv_freq = kvserve::engine::ComputeRopeInvFreq(*config, 4096);
    KVSERVE_FUZZ_CHECK(static_cast<int64_t>(inv_freq.size()) == config->RotaryDim() / 2,
                       "one frequency per rotated pair");
    kvserve::engine::ComputeLocalRopeInvFreq(*config);
    kvserve::engine::RopeAttentionScaling(*config);
    config->AttentionScale();
  } else {
    KVSERVE_FUZZ_CHECK(!config.status().message().empty(), "errors explain themselves");
  }
  (void)kvserve::engine::ParseGenerationConfig(json, "generation_config.json");
  return 0;
}
