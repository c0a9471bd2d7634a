// Speculative decoding by prompt lookup, over the hash model
// (scheduler_test_util.h), whose logits are a pure function of the cache
// contents: a wrong slot, a lost or extra token, a rejected draft left in the
// cache or in the prefix cache changes every later token. So outputs with
// speculation must equal HashModelReference's (no cache, no speculation)
// token for token, greedy and seeded sampling alike, for k in {1, 3, 5},
// with mixed batches, chunked prompts, prefix-cache hits, preemption and
// aborts; and the pool's invariants hold after every step. A 4-token
// vocabulary makes drafts agree with the sampler often enough that chains
// keep drafts at every position. Plus the NgramProposer itself.
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/engine_core.h"
#include "scheduler/ngram_proposer.h"
#include "tests/unit/scheduler/scheduler_test_util.h"

namespace kvserve::scheduler {
namespace {

using testing::Collector;
using ::testing::ElementsAre;
using testing::HashModelReference;
using testing::HashModelRunner;

TEST(NgramProposerTest, ProposesWhatFollowedTheLatestEarlierMatch) {
  NgramProposer p(/*min_n=*/2, /*max_n=*/3);
  std::vector<int32_t> t = {1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3};
  p.Extend(t);
  // [1 2 3] last occurred at 4..6, followed by 7 8 5 1.
  EXPECT_THAT(p.Propose(t, 3), ElementsAre(7, 8, 5));
  EXPECT_THAT(p.Propose(t, 10), ElementsAre(7, 8, 5, 1, 2, 3));  // up to the end
  t.push_back(4);                                                // [3 4] and [2 3 4] never occurred
  p.Extend(t);
  EXPECT_TRUE(p.Propose(t, 3).empty());
  t.push_back(1);  // [4 1] no; n=2 [4 1] no -> empty
  p.Extend(t);
  EXPECT_TRUE(p.Propose(t, 3).empty());
  t.push_back(2);  // [1 2] last at 10..11, followed by 3 4 1 2
  p.Extend(t);
  EXPECT_THAT(p.Propose(t, 2), ElementsAre(3, 4));
  EXPECT_TRUE(p.Propose(t, 0).empty());
  NgramProposer one(1, 1);
  const std::vector<int32_t> single = {5};
  one.Extend(single);
  EXPECT_TRUE(one.Propose(single, 4).empty());  // no earlier occurrence of anything
}

constexpr int32_t kVocab = 4;

class SpeculativeTest : public ::testing::TestWithParam<int32_t> {
 protected:
  void Init(int32_t budget, int32_t num_blocks, int32_t max_batch = 4) {
    EngineConfig c;
    c.batch = {.max_num_batched_tokens = budget, .max_num_seqs = 8};
    c.num_blocks = num_blocks;
    c.block_size = 4;
    c.hash_key = HashKey{1, 2};
    c.speculative = {
        .num_tokens = GetParam(), .ngram_min = 1, .ngram_max = 3, .max_batch = max_batch};
    ModelInfo info{.vocab_size = kVocab, .max_model_len = 1024, .eos_token_ids = {}};
    auto runner = std::make_unique<HashModelRunner>(num_blocks, 4, kVocab);
    core_ = std::make_unique<EngineCore>(c, info, std::move(runner));
  }
  void Add(RequestId id, RequestParams p) {
    params_[id] = p;
    ASSERT_TRUE(core_->AddRequest(id, std::move(p), collector_.For(id), TimePoint{}).ok());
  }
  void Step() {
    Scheduler& s = core_->scheduler();
    const SchedulerOutput out = s.Schedule(TimePoint{});
    if (!out.empty()) {
      auto result = core_->runner().Step(s.BuildStepInput(out));
      ASSERT_TRUE(result.ok()) << result.status();
      s.Update(out, *result, TimePoint{});
    }
    const absl::Status inv = core_->kv().CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv;
  }
  void RunToIdle() {
    for (int i = 0; i < 20000 && core_->HasUnfinished(); ++i) Step();
    ASSERT_FALSE(core_->HasUnfinished());
  }
  void ExpectReference(RequestId id) {
    EXPECT_EQ(collector_.results[id].tokens, HashModelReference(params_[id], kVocab, {}))
        << "request " << id;
  }

  std::unique_ptr<EngineCore> core_;
  Collector collector_;
  std::map<RequestId, RequestParams> params_;
};

RequestParams Request(std::vector<int32_t> prompt, int32_t max_tokens,
                      engine::SamplingParams sampling) {
  RequestParams p;
  p.prompt_tokens = std::move(prompt);
  p.stop.max_tokens = max_tokens;
  p.stop.ignore_eos = true;
  p.sampling = sampling;
  return p;
}

TEST_P(SpeculativeTest, OutputsEqualTheNonSpeculativeReference) {
  Init(/*budget=*/16, /*num_blocks=*/200);
  std::mt19937 rng(7);
  for (RequestId id = 1; id <= 6; ++id) {
    Add(id, Request(testing::RandomPrompt(rng, 5 + 7 * id, kVocab), 40,
                    testing::VariedSampling(static_cast<int>(id), 100)));
  }
  RunToIdle();
  for (RequestId id = 1; id <= 6; ++id) ExpectReference(id);
  const SchedulerStats stats = core_->Stats();
  EXPECT_GT(stats.spec_drafts, 0);
  EXPECT_GT(stats.spec_accepted_tokens, 0);
  EXPECT_LT(stats.spec_accepted_tokens, stats.spec_draft_tokens);
  // Chains kept drafts past the first position too (when there is one).
  ASSERT_EQ(stats.spec_accepted_per_position.size(), static_cast<size_t>(GetParam()));
  EXPECT_GT(stats.spec_accepted_per_position[0], 0);
  if (GetParam() > 1) EXPECT_GT(stats.spec_accepted_per_position[1], 0);
  for (size_t j = 1; j < stats.spec_accepted_per_position.size(); ++j) {
    EXPECT_LE(stats.spec_accepted_per_position[j], stats.spec_accepted_per_position[j - 1]);
  }
  EXPECT_EQ(core_->kv().pool().Stats().num_in_use, 0);
}

TEST_P(SpeculativeTest, PrefixHitsPreemptionAndAbortsKeepOutputsExact) {
  // 12 usable blocks of 4: the requests preempt one another; the second
  // round hits the prefix cache the first filled (never with a rejected token).
  Init(/*budget=*/12, /*num_blocks=*/13);
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(testing::RandomPrompt(rng, 9, kVocab));
  for (RequestId id = 1; id <= 4; ++id) {
    Add(id, Request(prompts[id - 1], 18, testing::VariedSampling(static_cast<int>(id), 5)));
  }
  Add(9, Request(prompts[0], 30, testing::VariedSampling(0, 5)));  // aborted mid-decode
  for (int i = 0; i < 6; ++i) Step();
  core_->scheduler().Abort(9, TimePoint{});
  RunToIdle();
  for (RequestId id = 5; id <= 8; ++id) {
    Add(id, Request(prompts[id - 5], 18, testing::VariedSampling(static_cast<int>(id), 5)));
  }
  RunToIdle();
  for (RequestId id = 1; id <= 8; ++id) ExpectReference(id);
  const SchedulerStats stats = core_->Stats();
  EXPECT_GT(stats.num_preemptions, 0);
  EXPECT_GT(stats.kv.prefix_hit_tokens, 0);
  EXPECT_GT(stats.spec_accepted_tokens, 0);
  EXPECT_EQ(core_->kv().pool().Stats().num_in_use, 0);
}

TEST_P(SpeculativeTest, OffWhileMoreThanMaxBatchDecode) {
  Init(/*budget=*/64, /*num_blocks=*/200, /*max_batch=*/2);
  std::mt19937 rng(3);
  for (RequestId id = 1; id <= 3; ++id) {
    Add(id, Request(testing::RandomPrompt(rng, 8, kVocab), 12, testing::VariedSampling(0, 1)));
  }
  RunToIdle();
  EXPECT_EQ(core_->Stats().spec_drafts, 0);  // three decode together from the first step
  for (RequestId id = 1; id <= 3; ++id) ExpectReference(id);
}

INSTANTIATE_TEST_SUITE_P(DraftLengths, SpeculativeTest, ::testing::Values(1, 3, 5));

}  // namespace
}  // namespace kvserve::scheduler
