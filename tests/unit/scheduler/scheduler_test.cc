// Scheduler scenarios with exact per-step decisions, driven step by step over
// the hash model (scheduler_test_util.h): budgets and chunking, decode
// first, priorities, prefix-cache hits, preemption and resume, aborts at
// every stage, queue limits, deadlines, step errors, stop strings and
// min_tokens end to end.
#include "scheduler/scheduler.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/engine_core.h"
#include "tests/unit/scheduler/scheduler_test_util.h"

namespace kvserve::scheduler {
namespace {

using testing::Collector;
using ::testing::ElementsAre;
using testing::Greedy;
using testing::HashModelReference;
using testing::HashModelRunner;
using ::testing::Pair;

using Decisions = std::vector<std::pair<RequestId, int32_t>>;

constexpr int32_t kVocab = 64;
constexpr int32_t kEos = 63;

class SchedulerTest : public ::testing::Test {
 protected:
  void Init(const EngineConfig& config, std::vector<int32_t> eos = {kEos}, int32_t vocab = kVocab,
            const engine::Tokenizer* tokenizer = nullptr) {
    vocab_ = vocab;
    eos_ = eos;
    ModelInfo info{.vocab_size = vocab,
                   .max_model_len = 1024,
                   .eos_token_ids = std::move(eos),
                   .tokenizer = tokenizer};
    auto runner = std::make_unique<HashModelRunner>(config.num_blocks, config.block_size, vocab);
    runner_ = runner.get();
    core_ = std::make_unique<EngineCore>(config, info, std::move(runner));
  }

  static EngineConfig Config(int32_t budget, int32_t num_blocks, int32_t block_size = 4) {
    EngineConfig c;
    c.batch = {.max_num_batched_tokens = budget, .max_num_seqs = 8};
    c.num_blocks = num_blocks;
    c.block_size = block_size;
    c.hash_key = HashKey{1, 2};
    return c;
  }

  absl::Status Add(RequestId id, RequestParams p, TimePoint now = TimePoint{}) {
    params_[id] = p;
    return core_->AddRequest(id, std::move(p), collector_.For(id), now);
  }

  // One step by hand: the decisions (id, tokens), then run and update.
  Decisions Step(TimePoint now = TimePoint{}) {
    Scheduler& s = core_->scheduler();
    const SchedulerOutput out = s.Schedule(now);
    Decisions d;
    for (const ScheduledRequest& r : out.scheduled)
      d.emplace_back(r.request->id(), r.num_new_tokens);
    last_preempted_ = out.num_preempted;
    if (!out.empty()) {
      auto result = runner_->Step(s.BuildStepInput(out));
      EXPECT_TRUE(result.ok()) << result.status();
      if (result.ok()) s.Update(out, *result, now);
    }
    const absl::Status inv = core_->kv().CheckInvariants();
    EXPECT_TRUE(inv.ok()) << inv;
    return d;
  }

  void RunToIdle() {
    for (int i = 0; i < 10000 && core_->HasUnfinished(); ++i) Step();
    ASSERT_FALSE(core_->HasUnfinished());
  }

  std::vector<int32_t> Reference(RequestId id) {
    return HashModelReference(params_[id], vocab_, eos_);
  }
  int32_t BlocksInUse() { return core_->kv().pool().Stats().num_in_use; }

  int32_t vocab_ = kVocab;
  std::vector<int32_t> eos_;
  std::unique_ptr<EngineCore> core_;
  HashModelRunner* runner_ = nullptr;
  Collector collector_;
  std::map<RequestId, RequestParams> params_;
  int32_t last_preempted_ = 0;
};

RequestParams NoEos(std::vector<int32_t> prompt, int32_t max_tokens) {
  RequestParams p = Greedy(std::move(prompt), max_tokens);
  p.stop.ignore_eos = true;
  return p;
}

std::vector<int32_t> Seq(int32_t first, int32_t n) {
  std::vector<int32_t> t(n);
  for (int32_t i = 0; i < n; ++i) t[i] = (first + i) % 60;
  return t;
}

TEST_F(SchedulerTest, BudgetChunksPromptsAndServesRunningFirst) {
  Init(Config(/*budget=*/8, /*num_blocks=*/33));
  ASSERT_TRUE(Add(1, NoEos(Seq(0, 10), 3)).ok());
  ASSERT_TRUE(Add(2, NoEos(Seq(20, 3), 3)).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 8)));              // chunk of the first prompt
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 2), Pair(2, 3)));  // rest, then admission
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 1), Pair(2, 1)));  // decodes
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 1), Pair(2, 1)));
  EXPECT_THAT(Step(), ElementsAre());
  EXPECT_FALSE(core_->HasUnfinished());
  EXPECT_EQ(collector_.results[1].tokens, Reference(1));
  EXPECT_EQ(collector_.results[2].tokens, Reference(2));
  EXPECT_EQ(collector_.results[1].final.finish_reason, FinishReason::kLength);
  EXPECT_EQ(BlocksInUse(), 0);
}

TEST_F(SchedulerTest, DecodesGoBeforePartialPrefills) {
  Init(Config(/*budget=*/4, /*num_blocks=*/33));
  ASSERT_TRUE(Add(1, NoEos(Seq(0, 9), 2)).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 4)));
  ASSERT_TRUE(Add(2, NoEos(Seq(30, 2), 4)).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 4)));
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 1), Pair(2, 2)));  // 1 samples; 2 admitted
  // 1 decodes its last token (pass 1), 2 decodes.
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 1), Pair(2, 1)));
  // A long prompt arriving now is chunked behind the decode of 2.
  ASSERT_TRUE(Add(3, NoEos(Seq(40, 12), 1)).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(2, 1), Pair(3, 3)));
  EXPECT_THAT(Step(), ElementsAre(Pair(2, 1), Pair(3, 3)));  // 2 done: 4 tokens
  EXPECT_THAT(Step(), ElementsAre(Pair(3, 4)));
  EXPECT_THAT(Step(), ElementsAre(Pair(3, 2)));
  EXPECT_FALSE(core_->HasUnfinished());
  for (RequestId id : {1, 2, 3}) EXPECT_EQ(collector_.results[id].tokens, Reference(id)) << id;
}

TEST_F(SchedulerTest, MaxNumSeqsBoundsTheRunningSet) {
  EngineConfig c = Config(64, 33);
  c.batch.max_num_seqs = 2;
  Init(c);
  for (RequestId id : {1, 2, 3}) ASSERT_TRUE(Add(id, NoEos(Seq(id, 3), 2)).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 3), Pair(2, 3)));
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 1), Pair(2, 1)));
  EXPECT_THAT(Step(), ElementsAre(Pair(3, 3)));
}

TEST_F(SchedulerTest, LowerPriorityValueIsAdmittedFirst) {
  Init(Config(/*budget=*/3, /*num_blocks=*/33));
  ASSERT_TRUE(Add(1, NoEos(Seq(0, 3), 1)).ok());
  RequestParams urgent = NoEos(Seq(10, 3), 1);
  urgent.priority = -1;
  ASSERT_TRUE(Add(2, urgent).ok());
  ASSERT_TRUE(Add(3, NoEos(Seq(20, 3), 1)).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(2, 3)));
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 3)));
  EXPECT_THAT(Step(), ElementsAre(Pair(3, 3)));
}

TEST_F(SchedulerTest, PrefixCacheServesFullBlocksButNotTheLastToken) {
  Init(Config(64, 33));
  const std::vector<int32_t> prompt = Seq(0, 12);  // 3 full blocks of 4
  ASSERT_TRUE(Add(1, NoEos(prompt, 2)).ok());
  RunToIdle();
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), {50, 51, 52});
  ASSERT_TRUE(Add(2, NoEos(longer, 2)).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(2, 3)));  // 12 tokens from the cache
  RunToIdle();
  ASSERT_TRUE(Add(3, NoEos(prompt, 2)).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(3, 4)));  // 2 blocks: the last token is computed
  RunToIdle();
  EXPECT_EQ(collector_.results[1].final.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(collector_.results[2].final.usage.cached_prompt_tokens, 12);
  EXPECT_EQ(collector_.results[3].final.usage.cached_prompt_tokens, 8);
  EXPECT_EQ(collector_.results[2].final.usage.prompt_tokens, 15);
  EXPECT_EQ(collector_.results[2].final.usage.completion_tokens, 2);
  for (RequestId id : {1, 2, 3}) EXPECT_EQ(collector_.results[id].tokens, Reference(id)) << id;
  const SchedulerStats stats = core_->Stats();
  EXPECT_EQ(stats.kv.prefix_hit_tokens, 20);
  EXPECT_EQ(stats.total_prompt_tokens_computed, 12 + 3 + 4);
}

TEST_F(SchedulerTest, SaltsSeparateTheCache) {
  Init(Config(64, 33));
  RequestParams a = NoEos(Seq(0, 9), 1);
  a.cache_salt = "alice";
  ASSERT_TRUE(Add(1, a).ok());
  RunToIdle();
  RequestParams b = a;
  b.cache_salt = "bob";
  ASSERT_TRUE(Add(2, b).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(2, 9)));
  ASSERT_TRUE(Add(3, a).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(3, 1)));
}

TEST_F(SchedulerTest, PreemptsItselfWhenLatestAndResumesFromTheCache) {
  // 4 usable blocks of 4 tokens. A: 7 + 6 needs 3 blocks; B: 3 + 6 needs 2.
  Init(Config(64, /*num_blocks=*/5));
  ASSERT_TRUE(Add(1, NoEos(Seq(0, 7), 6)).ok());
  ASSERT_TRUE(Add(2, NoEos(Seq(10, 3), 6)).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 7), Pair(2, 3)));
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 1), Pair(2, 1)));
  // A takes the last free block; B, the latest, needs one: B preempts itself.
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 1)));
  EXPECT_EQ(last_preempted_, 1);
  EXPECT_EQ(core_->scheduler().Find(2)->state(), RequestState::kWaiting);
  // B's full block is free-cached; reviving it leaves no block for its 5th token.
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 1)));
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 1)));
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 1)));  // A finishes (6 tokens)
  // B resumes: 3 prompt + 2 output tokens, the first 4 from the cache.
  EXPECT_THAT(Step(), ElementsAre(Pair(2, 1)));
  RunToIdle();
  EXPECT_EQ(collector_.results[1].tokens, Reference(1));
  EXPECT_EQ(collector_.results[2].tokens, Reference(2));
  EXPECT_EQ(core_->Stats().num_preemptions, 1);
  EXPECT_EQ(collector_.results[2].final.usage.cached_prompt_tokens, 0);  // first admission
  EXPECT_EQ(BlocksInUse(), 0);
}

TEST_F(SchedulerTest, VictimIsTheLowestPriorityRequest) {
  // 4 usable blocks. Three one-block prompts; the urgent one (arrived last)
  // must not be the victim when the first needs a block.
  Init(Config(64, /*num_blocks=*/5));
  ASSERT_TRUE(Add(1, NoEos(Seq(0, 4), 8)).ok());
  ASSERT_TRUE(Add(2, NoEos(Seq(10, 4), 8)).ok());
  RequestParams urgent = NoEos(Seq(20, 4), 8);
  urgent.priority = -5;
  ASSERT_TRUE(Add(3, urgent).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(3, 4), Pair(1, 4), Pair(2, 4)));
  // Everyone needs a second block; 1 free: 3 gets it, then 1 preempts 2.
  EXPECT_THAT(Step(), ElementsAre(Pair(3, 1), Pair(1, 1)));
  EXPECT_EQ(last_preempted_, 1);
  EXPECT_EQ(core_->scheduler().Find(2)->state(), RequestState::kWaiting);
  RunToIdle();
  for (RequestId id : {1, 2, 3}) EXPECT_EQ(collector_.results[id].tokens, Reference(id)) << id;
  EXPECT_EQ(BlocksInUse(), 0);
}

TEST_F(SchedulerTest, PrefillChunkShrinksToFreeBlocksBeforePreempting) {
  Init(Config(64, /*num_blocks=*/5));
  ASSERT_TRUE(Add(1, NoEos(Seq(0, 4), 5)).ok());  // 2 blocks at most
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 4)));
  ASSERT_TRUE(Add(2, NoEos(Seq(10, 9), 2)).ok());  // 3 blocks at most
  // 1 decodes into a new block; 2 gets the 2 blocks left: 8 of 9 tokens.
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 1), Pair(2, 8)));
  EXPECT_EQ(last_preempted_, 0);
  RunToIdle();
  for (RequestId id : {1, 2}) EXPECT_EQ(collector_.results[id].tokens, Reference(id)) << id;
}

TEST_F(SchedulerTest, AbortAtEveryStageFreesEveryBlock) {
  Init(Config(/*budget=*/8, 33));
  ASSERT_EQ(BlocksInUse(), 0);
  ASSERT_TRUE(Add(1, NoEos(Seq(0, 20), 5)).ok());  // chunked: 8, 8, 4
  ASSERT_TRUE(Add(2, NoEos(Seq(30, 4), 5)).ok());  // waits behind it
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 8)));
  EXPECT_GT(BlocksInUse(), 0);
  core_->Abort(2);  // waiting
  EXPECT_TRUE(collector_.results[2].finished);
  EXPECT_EQ(collector_.results[2].final.finish_reason, FinishReason::kAborted);
  EXPECT_EQ(collector_.results[2].final.status.code(), absl::StatusCode::kCancelled);
  core_->Abort(1);  // mid-prefill
  EXPECT_EQ(collector_.results[1].final.finish_reason, FinishReason::kAborted);
  EXPECT_EQ(collector_.results[1].final.usage.completion_tokens, 0);
  EXPECT_EQ(BlocksInUse(), 0);

  ASSERT_TRUE(Add(3, NoEos(Seq(5, 6), 5)).ok());
  Step();
  Step();  // running, 2 tokens out
  EXPECT_GT(BlocksInUse(), 0);
  core_->Abort(3);
  EXPECT_EQ(collector_.results[3].final.usage.completion_tokens, 2);
  EXPECT_EQ(collector_.results[3].tokens.size(), 2u);
  EXPECT_EQ(BlocksInUse(), 0);

  ASSERT_TRUE(Add(4, NoEos(Seq(7, 3), 1)).ok());
  Step();  // finished
  EXPECT_TRUE(collector_.results[4].finished);
  const int messages = collector_.results[4].num_messages;
  core_->Abort(4);   // just finished: no-op
  core_->Abort(99);  // unknown: no-op
  core_->Abort(3);   // twice: no-op
  EXPECT_EQ(collector_.results[4].num_messages, messages);
  EXPECT_EQ(collector_.results[4].final.finish_reason, FinishReason::kLength);
  EXPECT_EQ(BlocksInUse(), 0);
  const SchedulerStats stats = core_->Stats();
  EXPECT_EQ(stats.aborted[static_cast<int>(AbortCause::kClient)], 3);
  EXPECT_EQ(stats.finished[static_cast<int>(FinishReason::kAborted)], 3);
  EXPECT_EQ(stats.num_running + stats.num_waiting, 0);
}

TEST_F(SchedulerTest, QueueLimitsAndImpossibleRequests) {
  EngineConfig c = Config(4, /*num_blocks=*/9);  // 8 usable blocks of 4: 32 slots
  c.max_waiting_requests = 2;
  c.max_waiting_tokens = 20;
  Init(c);
  EXPECT_TRUE(Add(1, NoEos(Seq(0, 8), 4)).ok());
  EXPECT_TRUE(Add(2, NoEos(Seq(0, 8), 4)).ok());
  RejectReason reason{};
  absl::Status s = core_->AddRequest(3, NoEos(Seq(0, 2), 4), nullptr, TimePoint{}, &reason);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(reason, RejectReason::kQueueFullRequests);
  // Impossible: 30 + 4 - 1 slots > 32 available.
  s = core_->AddRequest(4, NoEos(Seq(0, 30), 4), nullptr, TimePoint{}, &reason);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reason, RejectReason::kInvalidArgument);
  Step();  // admits 1: one waiting, 8 tokens
  s = core_->AddRequest(5, NoEos(Seq(0, 13), 4), nullptr, TimePoint{}, &reason);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(reason, RejectReason::kQueueFullTokens);
  EXPECT_TRUE(Add(6, NoEos(Seq(0, 12), 4)).ok());
  const SchedulerStats stats = core_->Stats();
  EXPECT_EQ(stats.rejected[static_cast<int>(RejectReason::kQueueFullRequests)], 1);
  EXPECT_EQ(stats.rejected[static_cast<int>(RejectReason::kQueueFullTokens)], 1);
  EXPECT_EQ(stats.rejected[static_cast<int>(RejectReason::kInvalidArgument)], 1);
  EXPECT_EQ(collector_.results.count(3), 0u);  // never called back
  RunToIdle();
}

TEST_F(SchedulerTest, DeadlinesExpireWaitingAndRunningRequests) {
  Init(Config(/*budget=*/4, 33));
  const TimePoint t0{};
  const auto sec = std::chrono::seconds(1);
  RequestParams a = NoEos(Seq(0, 4), 20);
  a.deadline = t0 + 10 * sec;
  RequestParams b = NoEos(Seq(10, 4), 20);
  b.deadline = t0 + 2 * sec;
  ASSERT_TRUE(Add(1, a, t0).ok());
  ASSERT_TRUE(Add(2, b, t0).ok());
  EXPECT_THAT(Step(t0), ElementsAre(Pair(1, 4)));            // 2 waits (budget)
  EXPECT_THAT(Step(t0 + 3 * sec), ElementsAre(Pair(1, 1)));  // 2 expired while waiting
  EXPECT_EQ(collector_.results[2].final.finish_reason, FinishReason::kExpired);
  EXPECT_EQ(collector_.results[2].final.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(collector_.results[2].tokens.empty());
  EXPECT_THAT(Step(t0 + 10 * sec), ElementsAre());  // 1 expired while running
  EXPECT_EQ(collector_.results[1].final.finish_reason, FinishReason::kExpired);
  EXPECT_EQ(collector_.results[1].tokens.size(), 2u);  // partial output kept
  EXPECT_EQ(BlocksInUse(), 0);
  const SchedulerStats stats = core_->Stats();
  EXPECT_EQ(stats.aborted[static_cast<int>(AbortCause::kDeadlineWaiting)], 1);
  EXPECT_EQ(stats.aborted[static_cast<int>(AbortCause::kDeadlineRunning)], 1);
  EXPECT_EQ(stats.finished[static_cast<int>(FinishReason::kExpired)], 2);
}

class FailingRunner final : public StepRunner {
 public:
  absl::StatusOr<engine::StepOutput> Step(const engine::StepInput&) override {
    return absl::InternalError("device lost");
  }
};

TEST_F(SchedulerTest, StepErrorFinishesTheStepsRequests) {
  EngineConfig c = Config(64, 33);
  core_ = std::make_unique<EngineCore>(
      c, ModelInfo{.vocab_size = kVocab, .max_model_len = 100, .eos_token_ids = {kEos}},
      std::make_unique<FailingRunner>());
  ASSERT_TRUE(core_->AddRequest(1, NoEos(Seq(0, 5), 3), collector_.For(1)).ok());
  EXPECT_TRUE(core_->Step());
  EXPECT_EQ(collector_.results[1].final.finish_reason, FinishReason::kError);
  EXPECT_EQ(collector_.results[1].final.status.message(), "device lost");
  EXPECT_EQ(core_->last_step_error().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(BlocksInUse(), 0);
}

// Stop strings and min_tokens end to end: the hash model over an ASCII
// vocabulary, text through the byte tokenizer (one token = one byte).
TEST_F(SchedulerTest, StopStringAcrossTokensEndToEnd) {
  auto tokenizer = engine::MakeByteTokenizer();
  Init(Config(64, 65), /*eos=*/{}, /*vocab=*/128, tokenizer.get());
  const std::vector<int32_t> prompt = Seq(0, 6);
  ASSERT_TRUE(Add(1, NoEos(prompt, 40)).ok());
  RunToIdle();
  const std::string full = collector_.results[1].text;
  ASSERT_EQ(full.size(), 40u);
  const std::string stop = full.substr(10, 3);  // output tokens 10..12
  const size_t first = full.find(stop);
  RequestParams p = NoEos(prompt, 40);
  p.stop.stop_strings = {stop};
  ASSERT_TRUE(Add(2, p).ok());
  RunToIdle();
  const Collector::Result& r = collector_.results[2];
  EXPECT_EQ(r.final.finish_reason, FinishReason::kStopString);
  EXPECT_EQ(r.final.stop_string, stop);
  EXPECT_EQ(r.text, full.substr(0, first));
  EXPECT_EQ(r.final.usage.completion_tokens, static_cast<int32_t>(first + 3));
  EXPECT_EQ(r.num_messages, static_cast<int>(first + 3));  // one message per token
}

TEST_F(SchedulerTest, MinTokensMasksEos) {
  Init(Config(64, 65));
  const std::vector<int32_t> prompt = Seq(3, 5);
  ASSERT_TRUE(Add(1, NoEos(prompt, 8)).ok());
  RunToIdle();
  const std::vector<int32_t> free_run = collector_.results[1].tokens;
  // Make the first greedy token the EOS: without min_tokens it stops at once.
  Init(Config(64, 65), /*eos=*/{free_run[0]});
  ASSERT_TRUE(Add(2, Greedy(prompt, 8)).ok());
  RequestParams p = Greedy(prompt, 8);
  p.stop.min_tokens = 4;
  ASSERT_TRUE(Add(3, p).ok());
  RunToIdle();
  EXPECT_EQ(collector_.results[2].tokens, std::vector<int32_t>{free_run[0]});
  EXPECT_EQ(collector_.results[2].final.finish_reason, FinishReason::kStopToken);
  const std::vector<int32_t>& masked = collector_.results[3].tokens;
  ASSERT_GE(masked.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NE(masked[i], free_run[0]) << i;
}

TEST_F(SchedulerTest, LogprobsOnRequest) {
  Init(Config(64, 33));
  RequestParams p = NoEos(Seq(0, 5), 3);
  p.return_logprobs = true;
  p.sampling.num_logprobs = 2;
  ASSERT_TRUE(Add(1, p).ok());
  ASSERT_TRUE(Add(2, NoEos(Seq(0, 5), 3)).ok());
  RunToIdle();
  const Collector::Result& r = collector_.results[1];
  ASSERT_EQ(r.final.finish_reason, FinishReason::kLength);
  EXPECT_EQ(r.tokens, collector_.results[2].tokens);
  EXPECT_EQ(r.num_messages, 3);
  // Greedy: the chosen token is the top-1 and has the highest logprob.
  // (Collector merges token ids only; check the final message's own entry.)
  ASSERT_EQ(r.final.logprobs.size(), 1u);
  const TokenLogprobs& lp = r.final.logprobs[0];
  EXPECT_EQ(lp.token, r.tokens.back());
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].token, lp.token);
  EXPECT_EQ(lp.top[0].logprob, lp.logprob);
  EXPECT_LE(lp.logprob, 0.0f);
  EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
  EXPECT_TRUE(collector_.results[2].final.logprobs.empty());
}

void ExpectSameScores(const std::vector<TokenLogprobs>& got,
                      const std::vector<TokenLogprobs>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].token, want[i].token) << i;
    EXPECT_EQ(got[i].logprob, want[i].logprob) << i;
    EXPECT_EQ(got[i].rank, want[i].rank) << i;
    ASSERT_EQ(got[i].top.size(), want[i].top.size()) << i;
    for (size_t k = 0; k < got[i].top.size(); ++k) {
      EXPECT_EQ(got[i].top[k].token, want[i].top[k].token) << i << " " << k;
      EXPECT_EQ(got[i].top[k].logprob, want[i].top[k].logprob) << i << " " << k;
    }
  }
}

TEST_F(SchedulerTest, PromptLogprobsScoreEveryPromptTokenAcrossChunksAndSkipTheCache) {
  Init(Config(/*budget=*/4, 33));
  const std::vector<int32_t> prompt = Seq(3, 11);
  ASSERT_TRUE(Add(1, NoEos(prompt, 2)).ok());  // fills the prefix cache with 2 full blocks
  RunToIdle();
  RequestParams p = NoEos(prompt, 2);
  p.num_prompt_logprobs = 3;
  ASSERT_TRUE(Add(2, p).ok());
  // Chunks of the budget from position 0: no block is read from the cache.
  EXPECT_THAT(Step(), ElementsAre(Pair(2, 4)));
  EXPECT_THAT(Step(), ElementsAre(Pair(2, 4)));
  EXPECT_THAT(Step(), ElementsAre(Pair(2, 3)));
  RunToIdle();
  const Collector::Result& r = collector_.results[2];
  EXPECT_EQ(r.tokens, Reference(2));
  EXPECT_EQ(r.final.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(r.num_prompt_logprob_messages, 1);
  ExpectSameScores(r.prompt_logprobs, testing::HashModelPromptLogprobs(prompt, kVocab, 3));
  for (const TokenLogprobs& lp : r.prompt_logprobs) {
    EXPECT_GE(lp.rank, 1);
    EXPECT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.rank == 1, lp.top[0].token == lp.token);
  }
  // Its blocks entered the cache: the same prompt without scoring hits them.
  ASSERT_TRUE(Add(3, NoEos(prompt, 2)).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(3, 3)));
  EXPECT_TRUE(collector_.results[1].prompt_logprobs.empty());
}

TEST_F(SchedulerTest, MaxTokensZeroComputesThePromptAndFinishesUnsampled) {
  Init(Config(/*budget=*/8, 33));
  const std::vector<int32_t> prompt = Seq(7, 13);
  RequestParams scored = NoEos(prompt, 0);
  scored.num_prompt_logprobs = 0;
  ASSERT_TRUE(Add(1, scored).ok());
  ASSERT_TRUE(Add(2, NoEos(Seq(20, 5), 0)).ok());  // echoed only: nothing scored
  ASSERT_TRUE(Add(3, NoEos(Seq(30, 6), 3)).ok());  // decodes alongside
  RunToIdle();
  for (RequestId id : {1, 2}) {
    const Collector::Result& r = collector_.results[id];
    EXPECT_EQ(r.final.finish_reason, FinishReason::kLength) << id;
    EXPECT_TRUE(r.tokens.empty()) << id;
    EXPECT_EQ(r.final.usage.completion_tokens, 0) << id;
  }
  EXPECT_EQ(collector_.results[1].num_messages, 1);
  ExpectSameScores(collector_.results[1].prompt_logprobs,
                   testing::HashModelPromptLogprobs(prompt, kVocab, 0));
  EXPECT_TRUE(collector_.results[2].prompt_logprobs.empty());
  EXPECT_EQ(collector_.results[3].tokens, Reference(3));
  EXPECT_EQ(BlocksInUse(), 0);
}

TEST_F(SchedulerTest, PromptLogprobsSurvivePreemptionMidPrompt) {
  // 4 usable blocks of 4. A (scoring, 13 prompt tokens) is admitted after B
  // and preempted by B's growth before its prompt is done.
  Init(Config(/*budget=*/4, /*num_blocks=*/5));
  ASSERT_TRUE(Add(1, NoEos(Seq(40, 3), 9)).ok());
  EXPECT_THAT(Step(), ElementsAre(Pair(1, 3)));
  RequestParams a = NoEos(Seq(0, 13), 1);
  a.num_prompt_logprobs = 1;
  ASSERT_TRUE(Add(2, a).ok());
  RunToIdle();
  EXPECT_GE(core_->Stats().num_preemptions, 1);
  EXPECT_EQ(collector_.results[2].tokens, Reference(2));
  EXPECT_EQ(collector_.results[1].tokens, Reference(1));
  ExpectSameScores(collector_.results[2].prompt_logprobs,
                   testing::HashModelPromptLogprobs(Seq(0, 13), kVocab, 1));
  EXPECT_EQ(BlocksInUse(), 0);
}

}  // namespace
}  // namespace kvserve::scheduler
