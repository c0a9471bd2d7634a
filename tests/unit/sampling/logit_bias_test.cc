// SamplingParams::logit_bias: step 0 of sampler.h's pipeline. +100 forces a
// token and -100 bans it in every sampling mode; a bias is exactly a shift of
// the logit before the penalties; logprobs stay those of the raw row.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> RandomRow(int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(vocab);
  for (float& l : row) l = normal(rng);
  return row;
}

// The sampling modes the sampler has distinct paths for.
std::vector<SamplingParams> Modes() {
  std::vector<SamplingParams> modes;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  modes.push_back(greedy);
  SamplingParams plain;  // temperature 1, no truncation
  modes.push_back(plain);
  SamplingParams top_k;
  top_k.temperature = 0.7f;
  top_k.top_k = 5;
  modes.push_back(top_k);
  SamplingParams top_p;
  top_p.temperature = 1.3f;
  top_p.top_p = 0.9f;
  modes.push_back(top_p);
  SamplingParams min_p;
  min_p.min_p = 0.05f;
  modes.push_back(min_p);
  SamplingParams penalised;
  penalised.repetition_penalty = 1.3f;
  penalised.frequency_penalty = 0.5f;
  penalised.presence_penalty = 0.5f;
  modes.push_back(penalised);
  return modes;
}

// The token drawn at each of `positions` output positions (placeholder
// output tokens 0, 1, 2, ...: the penalties see them too).
std::vector<int32_t> Draws(std::span<const float> row, const SamplingParams& params,
                           int positions) {
  std::vector<int32_t> output;
  std::vector<int32_t> tokens;
  const std::vector<int32_t> prompt = {1, 2, 3};
  for (int i = 0; i < positions; ++i) {
    tokens.push_back(Sample(row, params, prompt, output).token);
    output.push_back(i % static_cast<int32_t>(row.size()));
  }
  return tokens;
}

TEST(LogitBiasTest, PlusHundredForcesATokenInEveryMode) {
  const std::vector<float> row = RandomRow(300, 1);
  for (const int32_t forced : {0, 137, 299}) {
    for (SamplingParams params : Modes()) {
      params.seed = 42;
      params.logit_bias = {{forced, 100.0f}};
      for (int32_t token : Draws(row, params, 200)) EXPECT_EQ(token, forced);
    }
  }
}

TEST(LogitBiasTest, MinusHundredBansATokenInEveryMode) {
  std::vector<float> row = RandomRow(50, 2);
  row[7] = 12.0f;  // by far the most likely token without the ban
  row[8] = 11.5f;
  for (SamplingParams params : Modes()) {
    params.seed = 7;
    const std::vector<int32_t> unbiased = Draws(row, params, 300);
    EXPECT_NE(std::count(unbiased.begin(), unbiased.end(), 7), 0);
    params.logit_bias = {{7, -100.0f}, {8, -100.0f}};
    for (int32_t token : Draws(row, params, 300)) {
      EXPECT_NE(token, 7);
      EXPECT_NE(token, 8);
    }
  }
}

TEST(LogitBiasTest, IsExactlyAShiftOfTheLogitBeforeThePenalties) {
  const std::vector<float> row = RandomRow(200, 3);
  const std::vector<TokenBias> bias = {{3, 2.5f}, {10, -1.25f}, {11, 0.75f}, {150, 4.0f}};
  std::vector<float> shifted = row;
  for (const TokenBias& b : bias) shifted[b.token] += b.bias;
  for (SamplingParams params : Modes()) {
    params.seed = 1234;
    SamplingParams biased = params;
    biased.logit_bias = bias;
    EXPECT_EQ(Draws(row, biased, 500), Draws(shifted, params, 500));
  }
}

TEST(LogitBiasTest, PenaltiesApplyToTheBiasedLogit) {
  // Token 1: logit 1, bias -2 -> -1, then the repetition penalty multiplies
  // the negative logit: -2. Penalty first would give 0.5 - 2 = -1.5.
  // Token 0 sits at -1.75 between the two orders.
  const std::vector<float> row = {-1.75f, 1.0f, -10.0f};
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 2.0f;
  params.logit_bias = {{1, -2.0f}};
  const std::vector<int32_t> prompt = {1};
  EXPECT_EQ(Sample(row, params, prompt, {}).token, 0);
  params.logit_bias = {{1, -1.0f}};  // 0 -> 0 either way: still above -1.75
  EXPECT_EQ(Sample(row, params, prompt, {}).token, 1);
}

TEST(LogitBiasTest, LogprobsStayThoseOfTheRawRow) {
  const std::vector<float> row = {0.5f, 1.0f, -0.25f, 2.0f};
  double z = 0.0;
  for (float l : row) z += std::exp(static_cast<double>(l));
  SamplingParams params;
  params.temperature = 0.0f;
  params.num_logprobs = 2;
  params.logit_bias = {{2, 100.0f}};
  const SampleResult result = Sample(row, params, {}, {});
  EXPECT_EQ(result.token, 2);
  EXPECT_NEAR(result.logprob, -0.25 - std::log(z), 1e-6);
  ASSERT_EQ(result.top_logprobs.size(), 2u);
  EXPECT_EQ(result.top_logprobs[0].token, 3);  // the raw ranking
  EXPECT_EQ(result.top_logprobs[1].token, 1);
}

TEST(LogitBiasTest, MaskedStaysMaskedAndExtremesStayFinite) {
  std::vector<float> row = {kNegInf, 0.0f, std::numeric_limits<float>::max(), -1.0f};
  SamplingParams params;
  params.temperature = 0.0f;
  params.logit_bias = {{0, 100.0f}, {2, 100.0f}};
  EXPECT_EQ(Sample(row, params, {}, {}).token, 2);  // masked token 0 stays masked
  params.logit_bias = {{0, 100.0f}, {2, -100.0f}};
  EXPECT_EQ(Sample(row, params, {}, {}).token, 2);  // FLT_MAX - 100 is still the max
  params.temperature = 1.0f;
  params.logit_bias = {{0, 100.0f}, {9, 100.0f}};  // id 9 outside this row: ignored
  for (int32_t token : Draws(row, params, 50)) EXPECT_EQ(token, 2);
}

TEST(LogitBiasTest, ValidateChecksRangeAndOrder) {
  SamplingParams params;
  params.logit_bias = {{1, -100.0f}, {5, 100.0f}};
  EXPECT_TRUE(params.Validate().ok());
  params.logit_bias = {{1, 100.5f}};
  EXPECT_FALSE(params.Validate().ok());
  params.logit_bias = {{1, std::nanf("")}};
  EXPECT_FALSE(params.Validate().ok());
  params.logit_bias = {{5, 1.0f}, {1, 1.0f}};
  EXPECT_FALSE(params.Validate().ok());
  params.logit_bias = {{1, 1.0f}, {1, 2.0f}};
  EXPECT_FALSE(params.Validate().ok());
  params.logit_bias = {{-1, 1.0f}};
  EXPECT_FALSE(params.Validate().ok());
}

}  // namespace
}  // namespace kvserve::engine
