// Parsing the tokenizer.json parts of the SentencePiece-converted pipeline
// (and the normalizers, which both pipelines share), plus the small helpers
// hf_tokenizer_json.cc uses too. Errors name the field, not the file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/tokenizer/hf_bpe_tokenizer.h"

namespace kvserve::engine::hf_json {

// "type" of a JSON object, or its dump when it has none.
std::string TypeOf(const nlohmann::json& j);
// UnimplementedError "unsupported <what>: <detail>".
absl::Status Unsupported(const std::string& what, const std::string& detail);
bool BoolOr(const nlohmann::json& j, const char* key, bool fallback);

// Appends to spec->normalizer (Sequences flattened).
absl::Status ParseNormalizer(const nlohmann::json& n, HfBpeSpec* spec);
// `steps`: the flattened pre-tokenizer, with no ByteLevel in it. Sets
// spec->byte_level = false.
absl::Status ParseSentencePiecePreTokenizer(const std::vector<const nlohmann::json*>& steps,
                                            HfBpeSpec* spec);
absl::Status ParseSentencePieceDecoder(const nlohmann::json& d, HfDecoderSpec* spec);

}  // namespace kvserve::engine::hf_json
