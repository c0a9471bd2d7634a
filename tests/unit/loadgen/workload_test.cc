// Workload generation: determinism under a seed, token-id ranges, length
// distribution bounds and moments, shared prefixes, Poisson arrivals.
#include "tools/loadgen/workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>

namespace kvserve::loadgen {
namespace {

WorkloadOptions Base() {
  WorkloadOptions o;
  o.num_requests = 200;
  o.seed = 42;
  o.vocab_size = 258;
  o.excluded_token_ids = {257};
  o.prompt_len = {LengthDist::kUniform, 20, 0, 10};
  o.output_len = {LengthDist::kNormal, 30, 5, 0};
  return o;
}

bool SameSpecs(const std::vector<RequestSpec>& a, const std::vector<RequestSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].prompt_ids != b[i].prompt_ids || a[i].max_tokens != b[i].max_tokens ||
        a[i].sampling_seed != b[i].sampling_seed || a[i].group != b[i].group) {
      return false;
    }
  }
  return true;
}

TEST(LoadgenWorkloadTest, SameSeedSameWorkloadOtherSeedOther) {
  auto a = GenerateWorkload(Base());
  auto b = GenerateWorkload(Base());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(SameSpecs(*a, *b));
  WorkloadOptions other = Base();
  other.seed = 43;
  auto c = GenerateWorkload(other);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(SameSpecs(*a, *c));
}

TEST(LoadgenWorkloadTest, OutputDistributionDoesNotChangeThePrompts) {
  WorkloadOptions other = Base();
  other.output_len = {LengthDist::kFixed, 7, 0, 0};
  auto a = GenerateWorkload(Base());
  auto b = GenerateWorkload(other);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].prompt_ids, (*b)[i].prompt_ids) << i;
    EXPECT_EQ((*b)[i].max_tokens, 7);
  }
}

TEST(LoadgenWorkloadTest, TokenIdsInVocabularyAndNeverExcluded) {
  WorkloadOptions o = Base();
  o.vocab_size = 10;
  o.excluded_token_ids = {3, 9};
  auto specs = GenerateWorkload(o);
  ASSERT_TRUE(specs.ok());
  std::vector<int> seen(10, 0);
  for (const RequestSpec& s : *specs) {
    for (int32_t id : s.prompt_ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, 10);
      ++seen[id];
    }
  }
  EXPECT_EQ(seen[3], 0);
  EXPECT_EQ(seen[9], 0);
  for (int id : {0, 1, 2, 4, 5, 6, 7, 8}) EXPECT_GT(seen[id], 0) << id;
}

TEST(LoadgenWorkloadTest, UniformLengthsStayInRangeAndCoverIt) {
  auto specs = GenerateWorkload(Base());  // prompt uniform in [10, 30]
  ASSERT_TRUE(specs.ok());
  size_t lo = 1000, hi = 0;
  for (const RequestSpec& s : *specs) {
    lo = std::min(lo, s.prompt_ids.size());
    hi = std::max(hi, s.prompt_ids.size());
  }
  EXPECT_EQ(lo, 10u);  // 200 draws from 21 values: both ends are hit
  EXPECT_EQ(hi, 30u);
}

TEST(LoadgenWorkloadTest, LengthDistributionsMomentsAndClamping) {
  Rng rng(7);
  const int n = 20000;
  auto moments = [&](const LengthSpec& spec, int64_t* min_seen) {
    double sum = 0, sq = 0;
    *min_seen = 1 << 30;
    for (int i = 0; i < n; ++i) {
      const int64_t x = DrawLength(spec, rng);
      *min_seen = std::min(*min_seen, x);
      sum += static_cast<double>(x);
      sq += static_cast<double>(x) * static_cast<double>(x);
    }
    const double mean = sum / n;
    return std::pair<double, double>(mean, std::sqrt(sq / n - mean * mean));
  };
  int64_t min_seen;
  auto [m1, s1] = moments({LengthDist::kNormal, 100, 20, 0}, &min_seen);
  EXPECT_NEAR(m1, 100, 1.0);
  EXPECT_NEAR(s1, 20, 1.0);
  auto [m2, s2] = moments({LengthDist::kLognormal, 100, 50, 0}, &min_seen);
  EXPECT_NEAR(m2, 100, 2.5);
  EXPECT_NEAR(s2, 50, 5.0);
  EXPECT_GE(min_seen, 1);
  // A wide normal around a small mean is clamped to >= 1.
  moments({LengthDist::kNormal, 2, 10, 0}, &min_seen);
  EXPECT_EQ(min_seen, 1);
  auto [m3, s3] = moments({LengthDist::kFixed, 17, 5, 5}, &min_seen);
  EXPECT_EQ(m3, 17);
  EXPECT_EQ(s3, 0);
  EXPECT_EQ(DrawLength({LengthDist::kUniform, 2, 0, 10}, rng) >= 1, true);
}

TEST(LoadgenWorkloadTest, MaxModelLenBoundsPromptPlusOutput) {
  WorkloadOptions o = Base();
  o.prompt_len = {LengthDist::kNormal, 60, 30, 0};
  o.output_len = {LengthDist::kNormal, 60, 30, 0};
  o.max_model_len = 100;
  auto specs = GenerateWorkload(o);
  ASSERT_TRUE(specs.ok());
  for (const RequestSpec& s : *specs) {
    EXPECT_GE(s.max_tokens, 1);
    EXPECT_GE(s.prompt_ids.size(), 1u);
    EXPECT_LE(static_cast<int64_t>(s.prompt_ids.size()) + s.max_tokens, 100);
  }
}

TEST(LoadgenWorkloadTest, SharedPrefixGroups) {
  WorkloadOptions o = Base();
  o.num_requests = 12;
  o.shared_prefix_len = 16;
  o.num_prefix_groups = 3;
  o.prompt_len = {LengthDist::kFixed, 5, 0, 0};
  auto specs = GenerateWorkload(o);
  ASSERT_TRUE(specs.ok());
  auto prefix = [](const RequestSpec& s) {
    return std::vector<int32_t>(s.prompt_ids.begin(), s.prompt_ids.begin() + 16);
  };
  for (const RequestSpec& s : *specs) {
    EXPECT_EQ(s.group, s.index % 3);
    EXPECT_EQ(s.prompt_ids.size(), 21u);  // prefix + own part
    EXPECT_EQ(prefix(s), prefix((*specs)[s.group])) << s.index;
  }
  EXPECT_NE(prefix((*specs)[0]), prefix((*specs)[1]));
  EXPECT_NE(prefix((*specs)[1]), prefix((*specs)[2]));
  // The own parts differ within a group.
  EXPECT_NE((*specs)[0].prompt_ids, (*specs)[3].prompt_ids);

  o.max_model_len = 17;  // 16 + 1 prompt token leaves no room for an output token
  EXPECT_FALSE(GenerateWorkload(o).ok());
}

TEST(LoadgenWorkloadTest, DatasetPromptsAreShuffledDeterministically) {
  WorkloadOptions o = Base();
  o.num_requests = 6;
  o.dataset_prompts = {"a", "b", "c"};
  o.dataset_output_lens = {-1, 5, -1};
  auto specs = GenerateWorkload(o);
  ASSERT_TRUE(specs.ok());
  std::vector<std::string> first(3), second(3);
  for (int i = 0; i < 3; ++i) {
    first[i] = (*specs)[i].prompt_text;
    second[i] = (*specs)[i + 3].prompt_text;
    EXPECT_TRUE((*specs)[i].prompt_ids.empty());
    if (first[i] == "b") {
      EXPECT_EQ((*specs)[i].max_tokens, 5);
    }
  }
  EXPECT_EQ(first, second);  // cycles through one permutation
  std::sort(first.begin(), first.end());
  EXPECT_EQ(first, (std::vector<std::string>{"a", "b", "c"}));
  auto again = GenerateWorkload(o);
  EXPECT_EQ((*again)[0].prompt_text, (*specs)[0].prompt_text);
}

TEST(LoadgenWorkloadTest, ReadDataset) {
  const std::string path = ::testing::TempDir() + "/loadgen_dataset.jsonl";
  {
    std::ofstream f(path);
    f << "{\"prompt\": \"hello\"}\n\n{\"prompt\": \"bye\", \"output_len\": 9}\n";
  }
  std::vector<std::string> prompts;
  std::vector<int64_t> lens;
  ASSERT_TRUE(ReadDataset(path, &prompts, &lens).ok());
  EXPECT_EQ(prompts, (std::vector<std::string>{"hello", "bye"}));
  EXPECT_EQ(lens, (std::vector<int64_t>{-1, 9}));
  {
    std::ofstream f(path);
    f << "{\"text\": \"x\"}\n";
  }
  EXPECT_FALSE(ReadDataset(path, &prompts, &lens).ok());
  EXPECT_FALSE(ReadDataset(path + ".missing", &prompts, &lens).ok());
}

TEST(LoadgenArrivalsTest, PoissonGapsHaveMeanOneOverRate) {
  const auto t = PoissonArrivals(20000, 4.0, 1);
  ASSERT_EQ(t.size(), 20000u);
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
  EXPECT_GT(t.front(), 0);
  EXPECT_NEAR(t.back() / 20000, 0.25, 0.25 * 0.03);  // mean gap 1 / rate
  EXPECT_EQ(PoissonArrivals(5, 4.0, 1), PoissonArrivals(5, 4.0, 1));
  EXPECT_NE(PoissonArrivals(5, 4.0, 1), PoissonArrivals(5, 4.0, 2));
  EXPECT_EQ(PoissonArrivals(3, INFINITY, 1), (std::vector<double>{0, 0, 0}));
}

TEST(LoadgenRngTest, UniformIntIsInclusiveAndUnbiasedEnough) {
  Rng rng(3);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 50000; ++i) ++counts[rng.UniformInt(0, 4)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
  EXPECT_EQ(rng.UniformInt(7, 7), 7);
}

}  // namespace
}  // namespace kvserve::loadgen
