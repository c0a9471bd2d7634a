// config.json parsing helpers shared by the loader's config tests.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/loader/model_config.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvserve::engine::testing {

inline absl::StatusOr<ModelConfig> Parse(const nlohmann::json& json) {
  return ParseModelConfig(json, "config.json");
}

// The error message of parsing `json` (fails the test when it parses).
inline std::string ParseError(const nlohmann::json& json) {
  absl::StatusOr<ModelConfig> c = Parse(json);
  EXPECT_FALSE(c.ok()) << "parsed unexpectedly";
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  const absl::string_view message = c.status().message();
  return {message.data(), message.size()};
}

}  // namespace kvserve::engine::testing
