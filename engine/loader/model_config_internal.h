// Internals of config.json parsing shared by model_config*.cc: a typed
// reader of one JSON object's fields, and the per-family parsers. Every
// accessor checks the JSON type before reading, so nlohmann never throws.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/loader/model_config.h"
#include "nlohmann/json.hpp"

namespace kvserve::engine::config_internal {

using Json = nlohmann::json;

// Reads fields of one JSON object; `prefix` names the object in messages
// ("" for the top level, "rope_scaling." for a nested dict).
class FieldReader {
 public:
  FieldReader(const Json& object, const std::string& source, const std::string& prefix)
      : object_(object), source_(source), prefix_(prefix) {}

  // nullptr when the field is absent or JSON null (transformers treats both as
  // "use the default").
  const Json* Get(const std::string& key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  // Present with the value null: transformers' None, which for some fields
  // (Gemma's soft-capping, sliding_window) differs from the absent default.
  bool IsExplicitNull(const std::string& key) const {
    auto it = object_.find(key);
    return it != object_.end() && it->is_null();
  }

  absl::Status Error(const std::string& key, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": field \"", prefix_, key, "\" ", what));
  }
  absl::Status Missing(const std::string& key) const { return Error(key, "missing"); }

  absl::StatusOr<std::optional<int64_t>> OptionalInt(const std::string& key) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(key, "is out of range");
      }
      return static_cast<int64_t>(u);
    }
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_float()) {
      // Some writers emit 4096.0; accept a float only when it is an integer.
      const double d = v->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 0x1p62) {
        return static_cast<int64_t>(d);
      }
    }
    return Error(key, absl::StrCat("must be an integer, got ", v->dump()));
  }

  absl::StatusOr<int64_t> RequiredInt(const std::string& key) const {
    absl::StatusOr<std::optional<int64_t>> v = OptionalInt(key);
    if (!v.ok()) return v.status();
    if (!v->has_value()) return Missing(key);
    return **v;
  }

  absl::StatusOr<int64_t> Int(const std::string& key, int64_t default_value) const {
    absl::StatusOr<std::optional<int64_t>> v = OptionalInt(key);
    if (!v.ok()) return v.status();
    return v->value_or(default_value);
  }

  absl::StatusOr<std::optional<double>> OptionalDouble(const std::string& key) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) return Error(key, absl::StrCat("must be a number, got ", v->dump()));
    return v->get<double>();
  }

  absl::StatusOr<double> Double(const std::string& key, double default_value) const {
    absl::StatusOr<std::optional<double>> v = OptionalDouble(key);
    if (!v.ok()) return v.status();
    return v->value_or(default_value);
  }

  absl::StatusOr<double> RequiredDouble(const std::string& key) const {
    absl::StatusOr<std::optional<double>> v = OptionalDouble(key);
    if (!v.ok()) return v.status();
    if (!v->has_value()) return Missing(key);
    return **v;
  }

  absl::StatusOr<bool> Bool(const std::string& key, bool default_value) const {
    const Json* v = Get(key);
    if (v == nullptr) return default_value;
    if (!v->is_boolean()) return Error(key, absl::StrCat("must be true or false, got ", v->dump()));
    return v->get<bool>();
  }

  absl::StatusOr<std::optional<std::string>> OptionalString(const std::string& key) const {
    const Json* v = Get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) return Error(key, absl::StrCat("must be a string, got ", v->dump()));
    return v->get<std::string>();
  }

  // A token id: an integer that fits int32 (range against the vocabulary is
  // Validate's job).
  absl::StatusOr<int32_t> TokenId(const std::string& key, const Json& v) const {
    if (!v.is_number_integer()) {
      return Error(key, absl::StrCat("must be a token id or a list of them, got ", v.dump()));
    }
    if (v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX
                               : (v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)) {
      return Error(key, absl::StrCat("token id ", v.dump(), " is out of range"));
    }
    return static_cast<int32_t>(v.get<int64_t>());
  }

 private:
  const Json& object_;
  std::string source_;
  std::string prefix_;
};

// Rope fields (model_config_rope.cc). Phi-3 also accepts partial_rotary_factor
// (top level or in the dict) and longrope / su.
absl::Status ParseRope(const FieldReader& top, const std::string& source, ModelConfig& c);
// Gemma 3: rope_parameters nested by layer type, or the 4.x fields
// rope_theta / rope_local_base_freq / rope_scaling (global layers only).
absl::Status ParseGemma3Rope(const FieldReader& top, const std::string& source, ModelConfig& c);

// Qwen2 and Qwen3: use_sliding_window / max_window_layers / layer_types.
absl::Status ParseQwenSlidingWindow(const FieldReader& r, const std::string& source,
                                    ModelConfig& c);

// Family-specific fields (model_config_families.cc), after the common ones
// (sizes, head_dim, token ids) are read. Each sets every feature field it owns.
absl::Status ParseQwen3(const FieldReader& r, const std::string& source, ModelConfig& c);
absl::Status ParsePhi3(const FieldReader& r, const std::string& source, ModelConfig& c);
absl::Status ParseGemma(const FieldReader& r, const std::string& source, ModelConfig& c);

}  // namespace kvserve::engine::config_internal
