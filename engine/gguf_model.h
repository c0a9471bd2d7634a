// What LoadModel takes from a GGUF file besides its weights: the config and
// checkpoint (engine/loader/gguf.h), the tokenizer built from
// `tokenizer.ggml.*` (engine/tokenizer/gguf_tokenizer.h) and the chat
// template `tokenizer.chat_template`.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/loader/gguf_file.h"
#include "engine/loader/model_config.h"
#include "engine/loader/safetensors.h"
#include "engine/model.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvserve::engine {

// A path LoadModel reads as a GGUF: one named *.gguf that is not a directory
// (a missing file is then NotFound naming it).
bool IsGgufPath(const std::string& path);

// The tokenizer.ggml.* values; NotFound when the file has no
// tokenizer.ggml.model. Errors name the key.
absl::StatusOr<GgufVocab> ReadGgufVocab(const GgufFile& file);

struct GgufModelParts {
  ModelConfig config;
  std::unique_ptr<SafetensorsCheckpoint> checkpoint;  // shares the file
  std::unique_ptr<Tokenizer> tokenizer;               // null: the file has none
  std::optional<EmbeddedChatTemplate> chat_template;
};

absl::StatusOr<GgufModelParts> OpenGgufModel(const std::string& path);

}  // namespace kvserve::engine
