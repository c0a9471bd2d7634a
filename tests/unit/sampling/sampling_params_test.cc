// SamplingParams::Validate: every field's bounds, both sides, NaN and
// infinities, and that the message names the field and its range.
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "engine/sampling/sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Case {
  std::string name;
  std::function<void(SamplingParams&)> set;
  std::string field;  // empty: valid
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ValidateTest : public ::testing::TestWithParam<Case> {};

TEST_P(ValidateTest, AcceptsOrNamesTheField) {
  SamplingParams params;
  GetParam().set(params);
  const absl::Status status = params.Validate();
  if (GetParam().field.empty()) {
    EXPECT_TRUE(status.ok()) << status;
    return;
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(GetParam().field + " must be "));
}

// One case per line reads better than packed.
// clang-format off
#define KV_CASE(label, stmt, field) \
  Case { label, [](SamplingParams& p) { stmt; }, field }

INSTANTIATE_TEST_SUITE_P(
    Matrix, ValidateTest,
    ::testing::Values(
        KV_CASE("defaults", (void)p, ""),
        KV_CASE("temperature_0", p.temperature = 0.0f, ""),
        KV_CASE("temperature_tiny", p.temperature = 1e-7f, ""),
        KV_CASE("temperature_max", p.temperature = 100.0f, ""),
        KV_CASE("temperature_negative", p.temperature = -0.1f, "temperature"),
        KV_CASE("temperature_above", p.temperature = 100.5f, "temperature"),
        KV_CASE("temperature_nan", p.temperature = kNaN, "temperature"),
        KV_CASE("temperature_inf", p.temperature = kInf, "temperature"),
        KV_CASE("top_k_minus1", p.top_k = -1, ""),
        KV_CASE("top_k_0", p.top_k = 0, ""),
        KV_CASE("top_k_1", p.top_k = 1, ""),
        KV_CASE("top_k_huge", p.top_k = 1 << 30, ""),
        KV_CASE("top_k_minus2", p.top_k = -2, "top_k"),
        KV_CASE("top_p_1", p.top_p = 1.0f, ""),
        KV_CASE("top_p_small", p.top_p = 1e-6f, ""),
        KV_CASE("top_p_0", p.top_p = 0.0f, "top_p"),
        KV_CASE("top_p_above", p.top_p = 1.01f, "top_p"),
        KV_CASE("top_p_nan", p.top_p = kNaN, "top_p"),
        KV_CASE("min_p_0", p.min_p = 0.0f, ""),
        KV_CASE("min_p_1", p.min_p = 1.0f, ""),
        KV_CASE("min_p_negative", p.min_p = -0.01f, "min_p"),
        KV_CASE("min_p_above", p.min_p = 1.5f, "min_p"),
        KV_CASE("min_p_nan", p.min_p = kNaN, "min_p"),
        KV_CASE("repetition_small", p.repetition_penalty = 0.01f, ""),
        KV_CASE("repetition_max", p.repetition_penalty = 2.0f, ""),
        KV_CASE("repetition_0", p.repetition_penalty = 0.0f, "repetition_penalty"),
        KV_CASE("repetition_negative", p.repetition_penalty = -1.0f, "repetition_penalty"),
        KV_CASE("repetition_above", p.repetition_penalty = 2.5f, "repetition_penalty"),
        KV_CASE("repetition_nan", p.repetition_penalty = kNaN, "repetition_penalty"),
        KV_CASE("presence_bounds", (p.presence_penalty = -2.0f, p.frequency_penalty = 2.0f), ""),
        KV_CASE("presence_below", p.presence_penalty = -2.01f, "presence_penalty"),
        KV_CASE("presence_above", p.presence_penalty = 2.01f, "presence_penalty"),
        KV_CASE("presence_nan", p.presence_penalty = kNaN, "presence_penalty"),
        KV_CASE("presence_inf", p.presence_penalty = -kInf, "presence_penalty"),
        KV_CASE("frequency_below", p.frequency_penalty = -3.0f, "frequency_penalty"),
        KV_CASE("frequency_above", p.frequency_penalty = 2.5f, "frequency_penalty"),
        KV_CASE("frequency_nan", p.frequency_penalty = kNaN, "frequency_penalty"),
        KV_CASE("logprobs_max", p.num_logprobs = kMaxLogprobs, ""),
        KV_CASE("logprobs_negative", p.num_logprobs = -1, "num_logprobs"),
        KV_CASE("logprobs_above", p.num_logprobs = kMaxLogprobs + 1, "num_logprobs"),
        KV_CASE("seed_any", p.seed = ~uint64_t{0}, "")),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

#undef KV_CASE
// clang-format on

TEST(ValidateMessageTest, NamesRangeAndValue) {
  SamplingParams params;
  params.top_p = 1.5f;
  const absl::Status status = params.Validate();
  EXPECT_THAT(status.message(), HasSubstr("top_p must be in (0, 1], got 1.5"));

  params = SamplingParams();
  params.temperature = kNaN;
  EXPECT_THAT(params.Validate().message(), HasSubstr("in [0, 100]"));
  EXPECT_THAT(params.Validate().message(), HasSubstr("nan"));

  params = SamplingParams();
  params.repetition_penalty = 3.0f;
  EXPECT_THAT(params.Validate().message(), HasSubstr("in (0, 2]"));

  params = SamplingParams();
  params.frequency_penalty = 3.0f;
  EXPECT_THAT(params.Validate().message(), HasSubstr("in [-2, 2]"));

  params = SamplingParams();
  params.num_logprobs = 21;
  EXPECT_THAT(params.Validate().message(), HasSubstr("in [0, 20]"));
}

}  // namespace
}  // namespace kvserve::engine
