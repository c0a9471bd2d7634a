// Sample(): greedy, truncation sets, penalties, logprobs, masking and
// determinism on small crafted rows. Exact draws against a reference
// implementation live in sampler_reference_test.cc.
#include "engine/sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <thread>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"

namespace kvserve::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAreArray;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kPositions = 2000;

SamplingParams Greedy() {
  SamplingParams params;
  params.temperature = 0.0f;
  return params;
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params,
                    std::span<const int32_t> prompt = {}, std::span<const int32_t> output = {}) {
  return Sample(logits, params, prompt, output).token;
}

// Tokens drawn at output positions 0..n-1 (the output tokens themselves are
// placeholders; penalties are off wherever this is used).
std::vector<int32_t> DrawMany(std::span<const float> logits, const SamplingParams& params,
                              int n = kPositions) {
  const std::vector<int32_t> placeholder(n, 0);
  std::vector<int32_t> tokens;
  tokens.reserve(n);
  for (int i = 0; i < n; ++i) {
    tokens.push_back(SampleToken(logits, params, {}, std::span(placeholder).first(i)));
  }
  return tokens;
}

std::set<int32_t> Distinct(const std::vector<int32_t>& tokens) {
  return {tokens.begin(), tokens.end()};
}

// Logits whose softmax is `probs`, placed at token ids `ids`; other ids of a
// row of `vocab` are masked.
std::vector<float> RowFromProbs(const std::vector<double>& probs, const std::vector<int32_t>& ids,
                                int vocab) {
  std::vector<float> row(vocab, kNegInf);
  for (size_t i = 0; i < probs.size(); ++i) row[ids[i]] = static_cast<float>(std::log(probs[i]));
  return row;
}

std::vector<float> RandomRow(int vocab, uint32_t seed, float scale = 2.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> row(vocab);
  for (float& l : row) l = normal(rng);
  return row;
}

// ---- Greedy ---------------------------------------------------------------

TEST(GreedyTest, TakesArgmax) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> row = RandomRow(1000, seed);
    const auto expected = std::max_element(row.begin(), row.end()) - row.begin();
    EXPECT_EQ(SampleToken(row, Greedy()), expected);
  }
}

TEST(GreedyTest, LowestIdWinsTies) {
  EXPECT_EQ(SampleToken(std::vector<float>{1, 3, 3, 2}, Greedy()), 1);
  EXPECT_EQ(SampleToken(std::vector<float>{kNegInf, 5, 5, 5}, Greedy()), 1);
  EXPECT_EQ(SampleToken(std::vector<float>{0, 0, 0}, Greedy()), 0);
}

TEST(GreedyTest, TemperatureBelowEpsilonIsGreedy) {
  SamplingParams params;
  params.temperature = 1e-6f;
  const std::vector<float> row{1, 3, 3, 2};
  for (int32_t token : DrawMany(row, params, 100)) EXPECT_EQ(token, 1);
}

TEST(GreedyTest, IgnoresTruncationButNotPenalties) {
  SamplingParams params = Greedy();
  params.top_k = 2;
  params.top_p = 0.1f;
  params.min_p = 0.9f;
  const std::vector<float> row{0.5f, 2.0f, 1.0f};
  EXPECT_EQ(SampleToken(row, params), 1);
  params.presence_penalty = 2.0f;
  const std::vector<int32_t> output{1};
  EXPECT_EQ(SampleToken(row, params, {}, output), 2);  // 2.0 - 2 = 0 < 1.0
}

TEST(GreedyTest, AllMaskedRowGivesTokenZero) {
  const std::vector<float> row(5, kNegInf);
  for (SamplingParams params : {Greedy(), SamplingParams()}) {
    params.num_logprobs = 2;
    const SampleResult result = Sample(row, params, {}, {});
    EXPECT_EQ(result.token, 0);
    EXPECT_EQ(result.logprob, kNegInf);
    ASSERT_EQ(result.top_logprobs.size(), 2u);
    EXPECT_EQ(result.top_logprobs[0].logprob, kNegInf);
  }
  SamplingParams truncating;
  truncating.top_k = 2;
  truncating.top_p = 0.5f;
  EXPECT_EQ(SampleToken(row, truncating), 0);
}

// ---- Temperature and truncation --------------------------------------------

TEST(TemperatureTest, FrequenciesFollowSoftmaxOfScaledLogits) {
  const std::vector<float> row{1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -2.0f};
  constexpr int kDraws = 20000;
  for (float temperature : {0.5f, 1.0f, 2.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.seed = 99;
    std::vector<int> counts(row.size(), 0);
    for (int32_t token : DrawMany(row, params, kDraws)) ++counts[token];
    double z = 0.0;
    for (float l : row) z += std::exp(l / temperature);
    for (size_t t = 0; t < row.size(); ++t) {
      const double expected = std::exp(row[t] / temperature) / z;
      EXPECT_NEAR(static_cast<double>(counts[t]) / kDraws, expected, 0.012)
          << "T=" << temperature << " token " << t;
    }
  }
}

TEST(TemperatureTest, TinyTemperatureSamplesOnlyAmongTopTies) {
  SamplingParams params;
  params.temperature = 1e-4f;                             // above kGreedyTemperature: still a draw
  const std::vector<float> row{1.0f, 3.0f, 3.0f, 2.99f};  // 2.99: 100 nats down
  EXPECT_THAT(Distinct(DrawMany(row, params, 200)), UnorderedElementsAreArray({1, 2}));
}

TEST(TemperatureTest, HighTemperatureFlattens) {
  const std::vector<float> row{0.0f, 1.0f, 2.0f, 5.0f};
  SamplingParams params;
  params.temperature = 100.0f;
  constexpr int kDraws = 8000;
  std::vector<int> counts(row.size(), 0);
  for (int32_t token : DrawMany(row, params, kDraws)) ++counts[token];
  double z = 0.0;
  for (float l : row) z += std::exp(l / 100.0);
  for (size_t t = 0; t < row.size(); ++t) {
    EXPECT_NEAR(static_cast<double>(counts[t]) / kDraws, std::exp(row[t] / 100.0) / z, 0.02);
  }
}

TEST(TopKTest, OneEqualsGreedy) {
  for (uint32_t seed = 0; seed < 10; ++seed) {
    std::vector<float> row = RandomRow(500, seed);
    row[7] = row[300] = *std::max_element(row.begin(), row.end()) + 1.0f;  // a tie at the top
    SamplingParams params;
    params.top_k = 1;
    params.seed = seed;
    params.temperature = 0.5f + 0.5f * seed;
    for (int32_t token : DrawMany(row, params, 200)) EXPECT_EQ(token, 7);
  }
}

TEST(TopKTest, KeepsTheKBestWithTiesByLowestId) {
  SamplingParams params;
  params.top_k = 3;
  const std::vector<float> row{0.0f, 1.0f, 1.0f, 0.5f, 1.0f, 1.0f, -1.0f};
  EXPECT_THAT(Distinct(DrawMany(row, params)), UnorderedElementsAreArray({1, 2, 4}));
  params.top_k = 5;
  EXPECT_THAT(Distinct(DrawMany(row, params)), UnorderedElementsAreArray({1, 2, 3, 4, 5}));
  params.top_k = 1000;  // >= vocab: off
  EXPECT_EQ(Distinct(DrawMany(row, params)).size(), row.size());
}

// Probabilities 0.4, 0.3, 0.15, 0.1, 0.05 at scattered ids of a row of 9.
const std::vector<double> kProbs{0.4, 0.3, 0.15, 0.1, 0.05};
const std::vector<int32_t> kIds{6, 2, 8, 0, 3};

std::set<int32_t> Ids(std::initializer_list<int> ranks) {
  std::set<int32_t> ids;
  for (int r : ranks) ids.insert(kIds[r]);
  return ids;
}

TEST(TopPTest, KeepsSmallestPrefixReachingP) {
  const std::vector<float> row = RowFromProbs(kProbs, kIds, 9);
  SamplingParams params;
  params.seed = 5;
  params.top_p = 0.35f;
  EXPECT_EQ(Distinct(DrawMany(row, params)), Ids({0}));
  params.top_p = 0.65f;
  EXPECT_EQ(Distinct(DrawMany(row, params)), Ids({0, 1}));
  params.top_p = 0.75f;
  EXPECT_EQ(Distinct(DrawMany(row, params)), Ids({0, 1, 2}));
  params.top_p = 0.9f;
  EXPECT_EQ(Distinct(DrawMany(row, params)), Ids({0, 1, 2, 3}));
  params.top_p = 1.0f;
  EXPECT_EQ(Distinct(DrawMany(row, params)), Ids({0, 1, 2, 3, 4}));
}

TEST(TopPTest, AlwaysKeepsAtLeastTheTopToken) {
  SamplingParams params;
  params.top_p = 1e-6f;
  EXPECT_EQ(Distinct(DrawMany(RowFromProbs(kProbs, kIds, 9), params, 300)), Ids({0}));
  // With a tie at the top, the lower id ranks first.
  EXPECT_EQ(Distinct(DrawMany(std::vector<float>{0.0f, 2.0f, 2.0f}, params, 300)),
            std::set<int32_t>{1});
}

TEST(TopPTest, IsRelativeToTheTopKSurvivors) {
  // Top-3 renormalised: 0.47, 0.35, 0.18 -> top_p 0.8 keeps two. Without the
  // renormalisation it would keep three (0.4 + 0.3 < 0.8).
  SamplingParams params;
  params.top_k = 3;
  params.top_p = 0.8f;
  EXPECT_EQ(Distinct(DrawMany(RowFromProbs(kProbs, kIds, 9), params)), Ids({0, 1}));
}

TEST(TopPTest, AppliesAfterTemperature) {
  // T = 0.5 squares the probabilities: 0.16 : 0.09 : 0.0225 ... -> the top
  // token alone has 0.16 / 0.2838 = 0.56 >= 0.5.
  SamplingParams params;
  params.temperature = 0.5f;
  params.top_p = 0.5f;
  EXPECT_EQ(Distinct(DrawMany(RowFromProbs(kProbs, kIds, 9), params)), Ids({0}));
  params.temperature = 1.0f;
  EXPECT_EQ(Distinct(DrawMany(RowFromProbs(kProbs, kIds, 9), params)), Ids({0, 1}));
}

TEST(MinPTest, DropsTokensBelowFractionOfTheMax) {
  const std::vector<float> row = RowFromProbs(kProbs, kIds, 9);
  SamplingParams params;
  params.seed = 11;
  params.min_p = 0.3f;  // threshold 0.12
  EXPECT_EQ(Distinct(DrawMany(row, params)), Ids({0, 1, 2}));
  params.min_p = 0.5f;  // threshold 0.2
  EXPECT_EQ(Distinct(DrawMany(row, params)), Ids({0, 1}));
  params.min_p = 0.1f;  // threshold 0.04
  EXPECT_EQ(Distinct(DrawMany(row, params)), Ids({0, 1, 2, 3, 4}));
  params.min_p = 1.0f;  // only tokens tied with the max
  EXPECT_EQ(Distinct(DrawMany(row, params)), Ids({0}));
  EXPECT_EQ(Distinct(DrawMany(std::vector<float>{2.0f, 1.0f, 2.0f}, params)),
            (std::set<int32_t>{0, 2}));
}

TEST(MinPTest, CombinesWithTopKAndTopP) {
  const std::vector<float> row = RowFromProbs(kProbs, kIds, 9);
  SamplingParams params;
  params.top_k = 4;
  params.top_p = 0.9f;  // of the top-4 (mass 0.95): keeps 3 (0.85 / 0.95 = 0.89 < 0.9 keeps 4)
  params.min_p = 0.3f;  // keeps 3
  EXPECT_EQ(Distinct(DrawMany(row, params)), Ids({0, 1, 2}));
  params.min_p = 0.2f;  // threshold 0.08: keeps 4
  EXPECT_EQ(Distinct(DrawMany(row, params)), Ids({0, 1, 2, 3}));
}

TEST(MaskingTest, MaskedAndNaNLogitsAreNeverDrawn) {
  std::vector<float> row = RandomRow(64, 3, 0.5f);
  std::set<int32_t> masked;
  for (int t = 0; t < 64; t += 3) {
    row[t] = (t % 2 == 0) ? kNegInf : std::numeric_limits<float>::quiet_NaN();
    masked.insert(t);
  }
  std::vector<SamplingParams> variants(5);
  variants[0].temperature = 100.0f;
  variants[1].top_k = 60;
  variants[2].top_p = 0.999f;
  variants[3].min_p = 1e-6f;
  variants[4].top_k = 100;
  variants[4].temperature = 50.0f;
  variants[4].top_p = 0.99f;
  for (const SamplingParams& params : variants) {
    const std::set<int32_t> drawn = Distinct(DrawMany(row, params));
    for (int32_t t : drawn) EXPECT_FALSE(masked.contains(t)) << t;
    EXPECT_GT(drawn.size(), 30u);  // the rest really is sampled
  }
}

TEST(MaskingTest, ExtremeFiniteValuesStayWellDefined) {
  constexpr float kMax = std::numeric_limits<float>::max();
  const std::vector<float> row{-kMax, kMax, 1e30f, -1e30f, 1e-40f, 0.0f, -0.0f, kMax};
  SamplingParams params;
  params.num_logprobs = 3;
  params.repetition_penalty = 0.01f;  // divides kMax by 0.01: clamped, not inf
  params.frequency_penalty = -2.0f;
  const std::vector<int32_t> history{1, 2, 4, 1};
  for (SamplingParams p : {params, Greedy()}) {
    p.top_p = 0.5f;
    for (int position = 0; position < 4; ++position) {
      const SampleResult result = Sample(row, p, history, std::span(history).first(position));
      EXPECT_TRUE(result.token == 1 || result.token == 7) << result.token;
      EXPECT_FALSE(std::isnan(result.logprob));
      for (const TokenLogprob& entry : result.top_logprobs) EXPECT_FALSE(std::isnan(entry.logprob));
    }
  }
}

TEST(MaskingTest, PositiveInfinityDominates) {
  const std::vector<float> row{0.0f, std::numeric_limits<float>::infinity(), 1.0f};
  SamplingParams params;
  params.num_logprobs = 1;
  const SampleResult result = Sample(row, params, {}, {});
  EXPECT_EQ(result.token, 1);
  EXPECT_FLOAT_EQ(result.logprob, 0.0f);
  EXPECT_EQ(SampleToken(row, Greedy()), 1);
}

// ---- Penalties (checked bit-exactly through greedy ties) --------------------

// Greedy over {competitor (id 0), penalised token (id 1)}: a tie goes to id 0,
// so `expected` is the penalised value exactly iff a competitor equal to it
// wins and one just below it loses.
void ExpectPenalisedTo(float logit, float expected, const SamplingParams& params,
                       std::span<const int32_t> prompt, std::span<const int32_t> output) {
  const std::vector<float> tie{expected, logit};
  EXPECT_EQ(SampleToken(tie, params, prompt, output), 0) << logit << " -> " << expected;
  const std::vector<float> below{std::nextafter(expected, kNegInf), logit};
  EXPECT_EQ(SampleToken(below, params, prompt, output), 1) << logit << " -> " << expected;
}

TEST(PenaltyTest, RepetitionDividesPositiveAndMultipliesNegativeOnce) {
  SamplingParams params = Greedy();
  params.repetition_penalty = 1.3f;
  // Token 1 repeats in prompt and output; the penalty still applies once.
  const std::vector<int32_t> only1_prompt{1, 1, 1};
  const std::vector<int32_t> output{1, 1};
  ExpectPenalisedTo(2.5f, 2.5f / 1.3f, params, only1_prompt, output);
  ExpectPenalisedTo(-0.7f, -0.7f * 1.3f, params, only1_prompt, {});
  ExpectPenalisedTo(0.0f, 0.0f, params, {}, output);
  params.repetition_penalty = 0.5f;  // < 1 rewards repeats
  ExpectPenalisedTo(2.5f, 2.5f / 0.5f, params, {}, output);
  ExpectPenalisedTo(-3.0f, -1.5f, params, only1_prompt, output);
}

TEST(PenaltyTest, FrequencyScalesWithCountAndPresenceDoesNot) {
  SamplingParams params = Greedy();
  const std::vector<int32_t> output{1, 4, 1, 1};  // token 1 three times; 4 is out of vocab
  params.frequency_penalty = 0.3f;
  ExpectPenalisedTo(2.0f, 2.0f - 0.3f * 3.0f, params, {}, output);
  params.frequency_penalty = 0.0f;
  params.presence_penalty = 0.7f;
  ExpectPenalisedTo(2.0f, 2.0f - 0.7f, params, {}, output);
  params.frequency_penalty = -0.25f;
  params.presence_penalty = 0.5f;
  float expected = 2.0f - (-0.25f * 3.0f);
  expected -= 0.5f;
  ExpectPenalisedTo(2.0f, expected, params, {}, output);
  // Prompt tokens do not count for frequency/presence.
  ExpectPenalisedTo(2.0f, 2.0f, params, output, {});
}

TEST(PenaltyTest, RepetitionComesBeforeFrequencyAndPresence) {
  SamplingParams params = Greedy();
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  const std::vector<int32_t> output{1, 1};
  float expected = 3.0f / 2.0f;
  expected -= 0.5f * 2.0f;
  expected -= 0.25f;
  ExpectPenalisedTo(3.0f, expected, params, {}, output);
}

TEST(PenaltyTest, MaskedStaysMaskedAndOutOfVocabIsIgnored) {
  SamplingParams params = Greedy();
  params.repetition_penalty = 0.1f;
  params.presence_penalty = -2.0f;
  params.frequency_penalty = -2.0f;
  const std::vector<float> row{kNegInf, -50.0f, kNegInf};
  const std::vector<int32_t> tokens{0, 2, -1, 3, 1 << 30};
  EXPECT_EQ(SampleToken(row, params, tokens, tokens), 1);
}

TEST(ScratchTest, LargeKeptSetsDoNotLeakIntoLaterCalls) {
  // Kept sets of hundreds of tokens are put in id order through the scratch
  // bitmap; a reused scratch must give what a fresh one gives.
  SamplingParams params;
  params.temperature = 5.0f;
  params.top_p = 0.95f;
  SamplerScratch shared;
  for (uint32_t seed = 0; seed < 6; ++seed) {
    const std::vector<float> row = RandomRow(3000 + 500 * seed, seed);
    const std::vector<int32_t> output(seed, 0);
    SamplerScratch fresh;
    params.seed = seed;
    EXPECT_EQ(Sample(row, params, {}, output, shared).token,
              Sample(row, params, {}, output, fresh).token)
        << seed;
    params.min_p = params.min_p == 0.0f ? 0.01f : 0.0f;
  }
}

TEST(PenaltyTest, ScratchCarriesNothingBetweenCalls) {
  SamplerScratch scratch;
  SamplingParams params = Greedy();
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 1.0f;
  const std::vector<float> row{2.0f, 1.5f};
  const std::vector<int32_t> output{0, 0};
  EXPECT_EQ(Sample(row, params, output, output, scratch).token, 1);
  // Same scratch, no history: nothing is penalised any more.
  EXPECT_EQ(Sample(row, params, {}, {}, scratch).token, 0);
  // A larger vocabulary next, then the small one again.
  const std::vector<float> big = RandomRow(5000, 1);
  EXPECT_EQ(Sample(big, params, output, output, scratch).token,
            Sample(big, params, output, output).token);
  EXPECT_EQ(Sample(row, params, {}, {}, scratch).token, 0);
}

// ---- Logprobs ---------------------------------------------------------------

TEST(LogprobTest, MatchDoubleLogSoftmaxOfRawLogitsSortedByValueThenId) {
  std::vector<float> row = RandomRow(1000, 17);
  for (int t = 0; t < 1000; t += 7) row[t] = kNegInf;
  row[500] = row[900] = row[100] = 9.0f;  // ties at the top: ids ascending
  row[40] = row[30] = 7.5f;
  double max = 9.0, sum = 0.0;
  for (float l : row) sum += std::exp(static_cast<double>(l) - max);
  const double lse = max + std::log(sum);

  std::vector<int32_t> order(row.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return row[a] > row[b]; });

  SamplingParams params;
  params.num_logprobs = kMaxLogprobs;
  params.temperature = 0.3f;  // neither temperature nor penalties change logprobs
  params.repetition_penalty = 1.7f;
  params.presence_penalty = 1.0f;
  const std::vector<int32_t> history{500, 900, 3, 4};
  for (int position = 0; position < 4; ++position) {
    const SampleResult result = Sample(row, params, history, std::span(history).first(position));
    ASSERT_EQ(result.top_logprobs.size(), static_cast<size_t>(kMaxLogprobs));
    for (int i = 0; i < kMaxLogprobs; ++i) {
      EXPECT_EQ(result.top_logprobs[i].token, order[i]) << i;
      EXPECT_NEAR(result.top_logprobs[i].logprob, row[order[i]] - lse, 1e-6) << i;
    }
    EXPECT_THAT(std::vector<int32_t>({result.top_logprobs[0].token, result.top_logprobs[1].token,
                                      result.top_logprobs[2].token}),
                ElementsAre(100, 500, 900));
    EXPECT_NEAR(result.logprob, row[result.token] - lse, 1e-6);
  }
}

TEST(LogprobTest, AccurateOverTheWholeExponentRange) {
  // Logits spread over [-100, 0]: the log-sum-exp sees every exponent the
  // float exp handles, and its underflow below -87.
  std::vector<float> row(1001);
  for (int i = 0; i < 1001; ++i) row[i] = -0.1f * static_cast<float>(i);
  std::reverse(row.begin(), row.end());
  double sum = 0.0;
  for (float l : row) sum += std::exp(static_cast<double>(l));
  const double lse = std::log(sum);
  SamplingParams params;
  params.num_logprobs = kMaxLogprobs;
  for (int position = 0; position < 20; ++position) {
    const std::vector<int32_t> output(position, 0);
    const SampleResult result = Sample(row, params, {}, output);
    for (const TokenLogprob& entry : result.top_logprobs) {
      EXPECT_NEAR(entry.logprob, row[entry.token] - lse, 1e-6);
    }
    EXPECT_NEAR(result.logprob, row[result.token] - lse, 1e-6);
  }
}

TEST(LogprobTest, TwoTokenRowsPinTheExpAccuracy) {
  // log_softmax of {0, x} at token 0 is -log1p(exp(x)): an error d in exp(x)
  // moves it by at most d / 2, so 1.5e-7 (plus float rounding) bounds the
  // relative error of the exp at about 3e-7 over the whole range.
  SamplingParams params;
  params.num_logprobs = 2;
  for (double x = -90.0; x <= 0.0; x += 0.05) {
    const std::vector<float> row{0.0f, static_cast<float>(x)};
    const SampleResult result = Sample(row, params, {}, {});
    const double expected = -std::log1p(std::exp(static_cast<double>(row[1])));
    ASSERT_EQ(result.top_logprobs[0].token, 0);
    EXPECT_NEAR(result.top_logprobs[0].logprob, expected, 1.5e-7 + 6e-8 * std::abs(expected))
        << "x=" << x;
  }
}

TEST(LogprobTest, CountAndMaskedEntries) {
  const std::vector<float> row{0.0f, kNegInf, 1.0f};
  SamplingParams params;
  params.num_logprobs = 0;
  EXPECT_THAT(Sample(row, params, {}, {}).top_logprobs, IsEmpty());
  params.num_logprobs = 5;  // more than the vocabulary
  const SampleResult result = Sample(row, params, {}, {});
  ASSERT_EQ(result.top_logprobs.size(), 3u);
  EXPECT_EQ(result.top_logprobs[0].token, 2);
  EXPECT_EQ(result.top_logprobs[1].token, 0);
  EXPECT_EQ(result.top_logprobs[2].token, 1);
  EXPECT_EQ(result.top_logprobs[2].logprob, kNegInf);
  EXPECT_NEAR(result.top_logprobs[0].logprob, -std::log1p(std::exp(-1.0)), 1e-7);
}

TEST(LogprobTest, WithoutLogprobsTheSameTokensAndNone) {
  const std::vector<int32_t> prompt{3, 9, 9};
  for (uint32_t seed = 0; seed < 40; ++seed) {
    const std::vector<float> row = RandomRow(3000, seed);
    SamplingParams params;
    params.temperature = seed % 4 == 0 ? 0.0f : 0.7f;
    params.top_k = seed % 3 == 1 ? 50 : 0;
    params.top_p = seed % 5 == 2 ? 0.8f : 1.0f;
    params.repetition_penalty = seed % 2 == 0 ? 1.3f : 1.0f;
    params.num_logprobs = 5;
    params.seed = seed;
    const std::vector<int32_t> output(seed % 7, 9);
    const SampleResult with = Sample(row, params, prompt, output);
    params.logprobs = false;
    const SampleResult without = Sample(row, params, prompt, output);
    EXPECT_EQ(without.token, with.token) << seed;
    EXPECT_TRUE(std::isnan(without.logprob)) << seed;
    EXPECT_THAT(without.top_logprobs, IsEmpty()) << seed;
    EXPECT_FALSE(std::isnan(with.logprob)) << seed;
    EXPECT_EQ(with.top_logprobs.size(), 5u) << seed;
  }
}

// ---- Determinism --------------------------------------------------------------

TEST(DeterminismTest, SameSeedAndPositionSameTokenAlways) {
  const std::vector<float> row = RandomRow(3000, 8, 1.0f);
  SamplingParams params;
  params.seed = 1234;
  params.top_k = 200;
  params.top_p = 0.95f;
  const std::vector<int32_t> first = DrawMany(row, params, 300);
  SamplerScratch scratch;
  const std::vector<int32_t> placeholder(300, 0);
  // Revisit positions out of order, with a fresh scratch, interleaved with
  // another request's draws.
  for (int i = 299; i >= 0; --i) {
    SamplingParams other = params;
    other.seed = 77;
    Sample(RandomRow(50, i), other, {}, std::span(placeholder).first(i % 7), scratch);
    EXPECT_EQ(Sample(row, params, {}, std::span(placeholder).first(i), scratch).token, first[i]);
  }
  EXPECT_EQ(DrawMany(row, params, 300), first);
}

TEST(DeterminismTest, ThreadsDrawTheSameTokens) {
  const std::vector<float> row = RandomRow(5000, 4, 1.5f);
  SamplingParams params;
  params.top_p = 0.9f;
  params.seed = 31;
  const std::vector<int32_t> expected = DrawMany(row, params, 50);
  std::vector<std::vector<int32_t>> got(3);
  std::vector<std::thread> threads;
  threads.reserve(got.size());
  for (auto& tokens : got) {
    threads.emplace_back([&] { tokens = DrawMany(row, params, 50); });
  }
  for (std::thread& thread : threads) thread.join();
  for (const auto& tokens : got) EXPECT_EQ(tokens, expected);
}

// The sampler's row loops have a baseline, an AVX2 and an AVX-512 build
// (picked by kernels::ActiveIsa); all must give the same bits: tokens,
// logprobs and the top logprobs, through the no-truncation draw, top-p and
// the log-sum-exp. The random rows but the 151,936-long ones are no
// multiple of a vector long, so the loops' tails run too. In the
// two-token rows (the rest masked) the top token's logprob is about minus
// the other's mass, so its bits show that mass's last bits (an FMA in one
// build changes some of them).
TEST(DeterminismTest, EveryIsaGivesTheSameBits) {
  struct Case {
    std::vector<float> row;
    float temperature, top_p;
  };
  std::vector<Case> cases;
  const std::vector<std::tuple<int, float, float>> random_rows{
      {37, 1.0f, 1.0f},     {3001, 0.7f, 1.0f},    {3001, 1.3f, 0.9f},
      {151936, 1.0f, 1.0f}, {151936, 0.8f, 0.95f}, {5003, 0.0f, 1.0f}};
  for (const auto& [vocab, temperature, top_p] : random_rows) {
    cases.push_back(
        {RandomRow(vocab, static_cast<uint32_t>(cases.size()), 4.0f), temperature, top_p});
  }
  for (int i = 0; i < 300; ++i) {
    std::vector<float> row(131, kNegInf);
    row[i % 131] = 0.0f;
    row[(i % 131 + 1 + i / 3) % 131] = -8.0f - 0.037f * static_cast<float>(i);
    cases.push_back({std::move(row), 1.0f, 1.0f});
  }
  auto draw_all = [&] {
    std::vector<SampleResult> results;
    for (size_t c = 0; c < cases.size(); ++c) {
      SamplingParams params;
      params.temperature = cases[c].temperature;
      params.top_p = cases[c].top_p;
      params.num_logprobs = 2;
      params.seed = 99 + c;
      const std::vector<int32_t> placeholder(8, 0);
      for (int position = 0; position < 8; ++position) {
        results.push_back(Sample(cases[c].row, params, {}, std::span(placeholder).first(position)));
      }
    }
    return results;
  };
  std::vector<SampleResult> baseline;
  {
    kernels::ScopedIsaOverride force(kernels::CpuIsa::kScalar);
    baseline = draw_all();
  }
  for (kernels::CpuIsa isa : {kernels::CpuIsa::kAvx2, kernels::CpuIsa::kAvx512}) {
    if (kernels::DetectedIsa() < isa) continue;
    kernels::ScopedIsaOverride force(isa);
    const std::vector<SampleResult> got = draw_all();
    ASSERT_EQ(got.size(), baseline.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const SampleResult &a = got[i], &b = baseline[i];
      EXPECT_EQ(a.token, b.token) << kernels::IsaName(isa) << " draw " << i;
      EXPECT_EQ(std::bit_cast<uint32_t>(a.logprob), std::bit_cast<uint32_t>(b.logprob))
          << kernels::IsaName(isa) << " draw " << i;
      ASSERT_EQ(a.top_logprobs.size(), b.top_logprobs.size());
      for (size_t t = 0; t < a.top_logprobs.size(); ++t) {
        EXPECT_EQ(a.top_logprobs[t].token, b.top_logprobs[t].token);
        EXPECT_EQ(std::bit_cast<uint32_t>(a.top_logprobs[t].logprob),
                  std::bit_cast<uint32_t>(b.top_logprobs[t].logprob))
            << kernels::IsaName(isa) << " draw " << i << " top " << t;
      }
    }
  }
}

TEST(DeterminismTest, PositionsAndSeedsVary) {
  const std::vector<float> flat(16, 0.0f);
  SamplingParams params;
  const std::vector<int32_t> seed0 = DrawMany(flat, params, 200);
  EXPECT_EQ(Distinct(seed0).size(), 16u);
  params.seed = 1;
  const std::vector<int32_t> seed1 = DrawMany(flat, params, 200);
  int same = 0;
  for (int i = 0; i < 200; ++i) same += seed0[i] == seed1[i];
  EXPECT_LT(same, 30);  // ~200 / 16 expected by chance
}

TEST(DeterminismTest, DrawIsTheInverseCdfOfCounterUniform) {
  // Two tokens of probability 1/4 and 3/4: token 0 iff u < 1/4.
  const std::vector<float> row{0.0f, static_cast<float>(std::log(3.0))};
  SamplingParams params;
  params.seed = 2024;
  const std::vector<int32_t> drawn = DrawMany(row, params, 500);
  for (int i = 0; i < 500; ++i) {
    const double u = CounterUniform(params.seed, i);
    if (std::abs(u - 0.25) < 1e-6) continue;
    EXPECT_EQ(drawn[i], u < 0.25 ? 0 : 1) << i;
  }
}

}  // namespace
}  // namespace kvserve::engine
