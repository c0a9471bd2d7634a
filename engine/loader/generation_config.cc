// Parsing of generation_config.json. Types are checked before reading, so
// nlohmann never throws out of here except the parse error that
// LoadGenerationConfig catches. Ranges are checked where the values are
// applied (engine::ApplySamplingDefaults validates a full SamplingParams).
#include "engine/loader/generation_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvserve::engine {
namespace {

using Json = nlohmann::json;

// transformers' GenerationConfig defaults: a value equal to one of these is
// not a checkpoint default (vLLM's get_diff_sampling_param does the same).
constexpr double kHfTemperature = 1.0;
constexpr double kHfTopP = 1.0;
constexpr int64_t kHfTopK = 50;
constexpr double kHfRepetitionPenalty = 1.0;

absl::Status FieldError(const std::string& source, std::string_view key, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": field \"", std::string(key), "\" ", what));
}

const Json* Get(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<std::optional<double>> OptionalNumber(const Json& object, const char* key,
                                                     const std::string& source) {
  const Json* v = Get(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number())
    return FieldError(source, key, absl::StrCat("must be a number, got ", v->dump()));
  const double d = v->get<double>();
  if (!std::isfinite(d)) return FieldError(source, key, "must be finite");
  return d;
}

absl::StatusOr<int32_t> TokenId(const Json& v, const std::string& source) {
  if (!v.is_number_integer()) {
    return FieldError(source, "eos_token_id", absl::StrCat("must hold integers, got ", v.dump()));
  }
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
    return FieldError(source, "eos_token_id", absl::StrCat("holds an invalid token id ", id));
  }
  return static_cast<int32_t>(id);
}

absl::Status ParseEos(const Json& json, const std::string& source, GenerationConfig& out) {
  const Json* eos = Get(json, "eos_token_id");
  if (eos == nullptr) return absl::OkStatus();
  if (!eos->is_array()) {
    auto id = TokenId(*eos, source);
    if (!id.ok()) return id.status();
    out.eos_token_ids.push_back(*id);
    return absl::OkStatus();
  }
  for (const Json& item : *eos) {
    auto id = TokenId(item, source);
    if (!id.ok()) return id.status();
    out.eos_token_ids = MergeEosTokenIds(std::move(out.eos_token_ids), {*id});
  }
  return absl::OkStatus();
}

// Reads `key` into *field when present and different from transformers'
// default `hf_default` (nullopt: every value counts).
absl::Status ReadFloat(const Json& json, const char* key, std::optional<double> hf_default,
                       const std::string& source, std::optional<float>* field) {
  auto v = OptionalNumber(json, key, source);
  if (!v.ok()) return v.status();
  if (*v && (!hf_default || **v != *hf_default)) *field = static_cast<float>(**v);
  return absl::OkStatus();
}

}  // namespace

std::vector<int32_t> MergeEosTokenIds(std::vector<int32_t> ids, const std::vector<int32_t>& extra) {
  for (int32_t id : extra) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

absl::StatusOr<GenerationConfig> ParseGenerationConfig(const Json& json,
                                                       std::string_view source_view) {
  const std::string source(source_view);
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": top level is not a JSON object"));
  }
  GenerationConfig out;
  KVSERVE_RETURN_IF_ERROR(ParseEos(json, source, out));
  SamplingDefaults& d = out.sampling;
  KVSERVE_RETURN_IF_ERROR(ReadFloat(json, "temperature", kHfTemperature, source, &d.temperature));
  KVSERVE_RETURN_IF_ERROR(ReadFloat(json, "top_p", kHfTopP, source, &d.top_p));
  KVSERVE_RETURN_IF_ERROR(ReadFloat(json, "min_p", std::nullopt, source, &d.min_p));
  KVSERVE_RETURN_IF_ERROR(
      ReadFloat(json, "repetition_penalty", kHfRepetitionPenalty, source, &d.repetition_penalty));
  if (const Json* top_k = Get(json, "top_k")) {
    if (!top_k->is_number_integer()) {
      return FieldError(source, "top_k", absl::StrCat("must be an integer, got ", top_k->dump()));
    }
    const int64_t k = top_k->get<int64_t>();
    if (k < -1 || k > std::numeric_limits<int32_t>::max()) {
      return FieldError(source, "top_k", absl::StrCat("is out of range: ", k));
    }
    if (k != kHfTopK) d.top_k = static_cast<int32_t>(k);
  }
  return out;
}

absl::StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& model_dir) {
  const std::filesystem::path path = std::filesystem::path(model_dir) / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return GenerationConfig{};
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  const Json json = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not valid JSON"));
  }
  return ParseGenerationConfig(json, path.string());
}

}  // namespace kvserve::engine
