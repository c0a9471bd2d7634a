// The scheduler samples a step's logits rows on the runner's thread pool
// (StepRunner::HostPool). Each row's token and logprobs are a pure function
// of the row and its request, so a run on a pool must give exactly what a
// run on the calling thread gives: tokens, text, logprobs (bit for bit) and
// finish reasons, with min_tokens masks, penalties and every sampling mode.
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/thread_pool.h"
#include "scheduler/engine_core.h"
#include "tests/unit/scheduler/scheduler_test_util.h"

namespace kvserve::scheduler {
namespace {

using testing::Collector;
using testing::HashModelRunner;

// Large enough that the scheduler splits a step's rows across the pool
// (it keeps rows of a small vocabulary on the calling thread).
constexpr int32_t kVocab = 65536;
constexpr int32_t kBlockSize = 8;
constexpr int32_t kNumBlocks = 256;

// The hash model, with the pool the scheduler may sample on.
class PooledHashRunner final : public StepRunner {
 public:
  explicit PooledHashRunner(kernels::ThreadPool* pool)
      : inner_(kNumBlocks, kBlockSize, kVocab), pool_(pool) {}
  absl::StatusOr<engine::StepOutput> Step(const engine::StepInput& input) override {
    return inner_.Step(input);
  }
  kernels::ThreadPool* HostPool() const override { return pool_; }

 private:
  HashModelRunner inner_;
  kernels::ThreadPool* pool_;
};

struct Outcome {
  Collector::Result result;
  std::vector<TokenLogprobs> logprobs;
};

std::vector<RequestParams> MakeRequests() {
  std::mt19937 rng(11);
  std::vector<RequestParams> requests;
  for (int i = 0; i < 16; ++i) {
    RequestParams p;
    p.prompt_tokens = testing::RandomPrompt(rng, 3 + 5 * i, kVocab);
    p.stop.max_tokens = 5 + i % 7;
    p.stop.stop_token_ids = {static_cast<int32_t>(i * 4099 % kVocab)};
    if (i % 3 == 0) {
      // Half the vocabulary stops, but not before 3 outputs.
      p.stop.min_tokens = 3;
      for (int32_t t = 0; t < kVocab / 2; ++t) p.stop.stop_token_ids.push_back(t);
    }
    p.return_logprobs = i % 2 == 0;
    p.sampling = testing::VariedSampling(i, 900);
    requests.push_back(std::move(p));
  }
  return requests;
}

std::map<RequestId, Outcome> RunRequests(kernels::ThreadPool* pool) {
  EngineConfig config;
  config.num_blocks = kNumBlocks;
  config.block_size = kBlockSize;
  config.batch = {.max_num_batched_tokens = 64, .max_num_seqs = 12};  // chunked prefills
  config.hash_key = HashKey{5, 5};
  EngineCore core(config, ModelInfo{.vocab_size = kVocab, .max_model_len = 256},
                  std::make_unique<PooledHashRunner>(pool));
  Collector collector;
  std::map<RequestId, Outcome> outcomes;
  const std::vector<RequestParams> requests = MakeRequests();
  for (size_t i = 0; i < requests.size(); ++i) {
    const RequestId id = static_cast<RequestId>(i);
    OutputCallback collect = collector.For(id);
    EXPECT_TRUE(core.AddRequest(id, requests[i],
                                [&, id, collect](RequestOutput&& out) {
                                  for (const TokenLogprobs& lp : out.logprobs) {
                                    outcomes[id].logprobs.push_back(lp);
                                  }
                                  collect(std::move(out));
                                })
                    .ok());
  }
  core.RunUntilIdle();
  EXPECT_TRUE(core.last_step_error().ok()) << core.last_step_error();
  for (auto& [id, result] : collector.results) outcomes[id].result = std::move(result);
  return outcomes;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(HostSamplingPool, SameOutputsAsTheCallingThread) {
  const std::map<RequestId, Outcome> serial = RunRequests(nullptr);
  kernels::ThreadPool pool(3);
  const std::map<RequestId, Outcome> pooled = RunRequests(&pool);
  const std::vector<RequestParams> requests = MakeRequests();
  ASSERT_EQ(serial.size(), requests.size());
  ASSERT_EQ(pooled.size(), serial.size());
  for (const auto& [id, s] : serial) {
    const Outcome& p = pooled.at(id);
    ASSERT_TRUE(s.result.finished && p.result.finished) << id;
    EXPECT_EQ(p.result.tokens, s.result.tokens) << "request " << id;
    EXPECT_EQ(p.result.final.finish_reason, s.result.final.finish_reason) << "request " << id;
    // Logprobs only where asked for: one entry per token, with the top ones.
    const RequestParams& params = requests[id];
    ASSERT_EQ(s.logprobs.size(), params.return_logprobs ? s.result.tokens.size() : 0u) << id;
    ASSERT_EQ(p.logprobs.size(), s.logprobs.size()) << id;
    for (size_t t = 0; t < s.logprobs.size(); ++t) {
      EXPECT_EQ(p.logprobs[t].token, s.logprobs[t].token);
      EXPECT_TRUE(std::isfinite(s.logprobs[t].logprob) && s.logprobs[t].logprob <= 0.0f);
      EXPECT_TRUE(SameBits(p.logprobs[t].logprob, s.logprobs[t].logprob)) << id << " " << t;
      ASSERT_EQ(s.logprobs[t].top.size(), static_cast<size_t>(params.sampling.num_logprobs));
      ASSERT_EQ(p.logprobs[t].top.size(), s.logprobs[t].top.size());
      for (size_t k = 0; k < s.logprobs[t].top.size(); ++k) {
        EXPECT_EQ(p.logprobs[t].top[k].token, s.logprobs[t].top[k].token);
        EXPECT_TRUE(SameBits(p.logprobs[t].top[k].logprob, s.logprobs[t].top[k].logprob));
      }
    }
  }
  // min_tokens held: no request with the mask stopped before 3 outputs.
  for (size_t i = 0; i < requests.size(); i += 3) {
    EXPECT_GE(serial.at(i).result.tokens.size(), 3u) << i;
  }
}

}  // namespace
}  // namespace kvserve::scheduler
