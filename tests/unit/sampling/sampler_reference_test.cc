// Sample() against a naive reference written straight from the contract in
// sampler.h: full sort, probabilities in double, cuts by their textbook
// definitions, inverse CDF in ascending id. Every draw must be the same token.
// (The implementation rounds masses to float; a draw could only differ if u
// fell within ~1e-7 of a CDF boundary, which these fixed inputs do not hit.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> PenalisedRow(std::span<const float> logits, const SamplingParams& params,
                                std::span<const int32_t> prompt, std::span<const int32_t> output) {
  const int vocab = static_cast<int>(logits.size());
  std::vector<float> w;
  for (float l : logits) {
    w.push_back(std::isnan(l) ? kNegInf : std::min(l, std::numeric_limits<float>::max()));
  }
  std::set<int32_t> seen;
  std::map<int32_t, int> counts;
  for (int32_t t : prompt) {
    if (t >= 0 && t < vocab) seen.insert(t);
  }
  for (int32_t t : output) {
    if (t >= 0 && t < vocab) {
      seen.insert(t);
      ++counts[t];
    }
  }
  if (params.repetition_penalty != 1.0f) {
    for (int32_t t : seen) {
      w[t] = w[t] > 0
                 ? std::min(w[t] / params.repetition_penalty, std::numeric_limits<float>::max())
                 : w[t] * params.repetition_penalty;
    }
  }
  for (const auto& [t, c] : counts) {
    w[t] -= params.frequency_penalty * static_cast<float>(c);
    w[t] -= params.presence_penalty;
  }
  return w;
}

int32_t ReferenceSample(std::span<const float> logits, const SamplingParams& params,
                        std::span<const int32_t> prompt, std::span<const int32_t> output) {
  const std::vector<float> w = PenalisedRow(logits, params, prompt, output);
  const int vocab = static_cast<int>(w.size());
  // Rank order: logit descending, then id ascending.
  std::vector<std::pair<float, int32_t>> ranked(vocab);
  for (int t = 0; t < vocab; ++t) ranked[t] = {-w[t], t};
  std::sort(ranked.begin(), ranked.end());
  std::vector<int32_t> order(vocab);
  for (int j = 0; j < vocab; ++j) order[j] = ranked[j].second;
  if (params.temperature < kGreedyTemperature || w[order[0]] == kNegInf) return order[0];

  std::vector<double> prob(vocab);
  for (int t = 0; t < vocab; ++t) {
    prob[t] = std::exp((double{w[t]} - w[order[0]]) / params.temperature);
  }
  int n = (params.top_k >= 1 && params.top_k < vocab) ? params.top_k : vocab;
  double z = 0.0;
  for (int j = 0; j < n; ++j) z += prob[order[j]];
  if (params.top_p < 1.0f) {
    double cumulative = 0.0;
    for (int j = 0; j < n; ++j) {
      cumulative += prob[order[j]] / z;
      if (cumulative >= params.top_p) {
        n = j + 1;
        break;
      }
    }
  }
  int m = 0;
  while (m < n && prob[order[m]] >= params.min_p * prob[order[0]]) ++m;
  n = m;

  std::vector<int32_t> kept(order.begin(), order.begin() + n);
  std::sort(kept.begin(), kept.end());
  double total = 0.0;
  for (int32_t t : kept) total += prob[t];
  const double target = CounterUniform(params.seed, output.size()) * total;
  double cumulative = 0.0;
  for (int32_t t : kept) {
    cumulative += prob[t];
    if (prob[t] > 0.0 && cumulative > target) return t;
  }
  ADD_FAILURE() << "reference draw fell off the end";
  return -1;
}

struct Scenario {
  std::string name;
  int vocab;
  int positions;
  SamplingParams params;
};

void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

SamplingParams Make(float temperature, int top_k, float top_p, float min_p, float repetition = 1.0f,
                    float presence = 0.0f, float frequency = 0.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = repetition;
  p.presence_penalty = presence;
  p.frequency_penalty = frequency;
  return p;
}

class ReferenceTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(ReferenceTest, SameTokenAtEveryPosition) {
  const Scenario& scenario = GetParam();
  SamplingParams params = scenario.params;
  params.seed = 0x5EED + scenario.vocab;

  // A row with a peaked head, ties, masked and NaN entries.
  std::mt19937 rng(scenario.vocab);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> row(scenario.vocab);
  for (float& l : row) l = normal(rng);
  std::uniform_int_distribution<int> pick(0, scenario.vocab - 1);
  for (int i = 0; i < scenario.vocab / 50 + 1; ++i) row[pick(rng)] = kNegInf;
  row[pick(rng)] = std::numeric_limits<float>::quiet_NaN();
  for (int i = 0; i < 3; ++i) row[pick(rng)] = 8.0f;  // tied head
  row[pick(rng)] = 7.0f;

  // A history that keeps repeating head tokens, so penalties matter.
  std::vector<int32_t> prompt, output;
  for (int i = 0; i < 40; ++i) prompt.push_back(pick(rng));
  const auto key = [&](int32_t t) { return std::isnan(row[t]) ? kNegInf : row[t]; };
  std::vector<int32_t> head(scenario.vocab);
  std::iota(head.begin(), head.end(), 0);
  const int num_head = std::min(8, scenario.vocab);
  std::partial_sort(head.begin(), head.begin() + num_head, head.end(),
                    [&](int32_t a, int32_t b) { return key(a) > key(b); });
  for (int i = 0; i < scenario.positions; ++i) output.push_back(head[i % num_head]);

  SamplerScratch scratch;
  std::set<int32_t> distinct;
  for (int i = 0; i < scenario.positions; ++i) {
    const std::span<const int32_t> so_far = std::span(output).first(i);
    const int32_t token = Sample(row, params, prompt, so_far, scratch).token;
    ASSERT_EQ(token, ReferenceSample(row, params, prompt, so_far)) << "position " << i;
    distinct.insert(token);
  }
  // Guard against a degenerate scenario that compares nothing interesting.
  if (params.temperature >= 1.0f && params.top_k != 1) {
    EXPECT_GT(distinct.size(), 1u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Scenarios, ReferenceTest,
    ::testing::Values(
        Scenario{"plain_small", 7, 400, Make(1.0f, 0, 1.0f, 0.0f)},
        Scenario{"plain", 1000, 400, Make(1.0f, -1, 1.0f, 0.0f)},
        Scenario{"hot", 1000, 300, Make(3.0f, 0, 1.0f, 0.0f)},
        Scenario{"cold", 1000, 300, Make(0.2f, 0, 1.0f, 0.0f)},
        Scenario{"greedy_penalised", 1000, 100, Make(0.0f, 0, 1.0f, 0.0f, 1.5f, 0.5f, 0.3f)},
        Scenario{"top_k", 1000, 300, Make(1.0f, 5, 1.0f, 0.0f)},
        Scenario{"top_k_large", 1000, 200, Make(1.5f, 700, 1.0f, 0.0f)},
        Scenario{"top_p", 1000, 300, Make(1.0f, 0, 0.9f, 0.0f)},
        Scenario{"top_p_hot", 1000, 200, Make(4.0f, 0, 0.97f, 0.0f)},
        Scenario{"top_k_top_p", 1000, 300, Make(1.2f, 20, 0.5f, 0.0f)},
        Scenario{"min_p", 1000, 300, Make(1.0f, 0, 1.0f, 0.05f)},
        Scenario{"min_p_hot", 1000, 200, Make(5.0f, 0, 1.0f, 0.3f)},
        Scenario{"everything", 1000, 300, Make(0.8f, 40, 0.92f, 0.02f, 1.2f, 0.4f, 0.2f)},
        Scenario{"negative_penalties", 1000, 200, Make(1.0f, 0, 0.8f, 0.0f, 0.8f, -1.0f, -0.5f)},
        Scenario{"top_k_by_selection", 20000, 25, Make(1.0f, 6000, 1.0f, 0.0f)},
        Scenario{"top_k_by_heap", 20000, 25, Make(2.0f, 3000, 0.9f, 0.0f)},
        Scenario{"top_p_large_kept_set", 20000, 25, Make(3.0f, 0, 0.95f, 0.0f)},
        Scenario{"min_p_large_kept_set", 20000, 25, Make(6.0f, 0, 1.0f, 0.2f)},
        Scenario{"vocab_152k_top_k", 151936, 6, Make(1.0f, 50, 1.0f, 0.0f)},
        Scenario{"vocab_152k_top_p", 151936, 6, Make(0.9f, 0, 0.95f, 0.0f, 1.1f)},
        Scenario{"vocab_152k_plain", 151936, 6, Make(1.0f, 0, 1.0f, 0.0f)}),
    [](const ::testing::TestParamInfo<Scenario>& info) { return info.param.name; });

}  // namespace
}  // namespace kvserve::engine
