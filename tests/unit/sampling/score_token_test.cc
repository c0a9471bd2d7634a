// ScoreToken (prompt logprobs): the given token's logprob is the raw row's
// log_softmax in double precision, its rank counts the tokens before it in
// the rank order (logit desc, id asc), and the top entries are Sample()'s.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

std::vector<float> RandomRow(int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(vocab);
  for (float& l : row) l = normal(rng);
  return row;
}

double LogSoftmax(const std::vector<float>& row, int32_t token) {
  double max = -std::numeric_limits<double>::infinity();
  for (float l : row) max = std::max<double>(max, l);
  double sum = 0;
  for (float l : row) sum += std::exp(static_cast<double>(l) - max);
  return row[token] - max - std::log(sum);
}

TEST(ScoreTokenTest, LogprobRankAndTopOfEveryToken) {
  const std::vector<float> row = RandomRow(257, 7);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.num_logprobs = 5;
  const SampleResult drawn = Sample(row, greedy, {}, {});
  for (int32_t token = 0; token < static_cast<int32_t>(row.size()); ++token) {
    const TokenScore s = ScoreToken(row, token, 5);
    EXPECT_EQ(s.token, token);
    EXPECT_NEAR(s.logprob, LogSoftmax(row, token), 1e-5) << token;
    int32_t above = 0;
    for (float l : row) above += l > row[token] ? 1 : 0;  // no ties in a normal row
    EXPECT_EQ(s.rank, above + 1) << token;
    ASSERT_EQ(s.top_logprobs.size(), 5u);
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(s.top_logprobs[k].token, drawn.top_logprobs[k].token);
      EXPECT_EQ(s.top_logprobs[k].logprob, drawn.top_logprobs[k].logprob);
    }
  }
  // The argmax, scored, is what greedy sampling reports for it.
  const TokenScore top = ScoreToken(row, drawn.token, 0);
  EXPECT_EQ(top.rank, 1);
  EXPECT_EQ(top.logprob, drawn.logprob);
  EXPECT_TRUE(top.top_logprobs.empty());
}

TEST(ScoreTokenTest, TiesRankByIdAndMaskedTokensScoreMinusInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> row = {1.0f, 2.0f, 2.0f, -inf, std::nanf("")};
  EXPECT_EQ(ScoreToken(row, 1, 0).rank, 1);
  EXPECT_EQ(ScoreToken(row, 2, 0).rank, 2);  // tied with 1, larger id
  EXPECT_EQ(ScoreToken(row, 0, 0).rank, 3);
  EXPECT_EQ(ScoreToken(row, 3, 0).logprob, -inf);
  EXPECT_EQ(ScoreToken(row, 4, 0).logprob, -inf);  // NaN is treated as -inf
  const TokenScore all = ScoreToken(row, 0, 20);
  EXPECT_EQ(all.top_logprobs.size(), row.size());  // capped at the vocabulary
}

}  // namespace
}  // namespace kvserve::engine
