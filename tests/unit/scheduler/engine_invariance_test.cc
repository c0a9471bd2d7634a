// Through the real CPU engine (builtin:tiny and the tiny model of each other
// family: tiny-qwen3, tiny-phi3, tiny-gemma2, tiny-gemma3), greedy and seeded sampling
// (temperature 0.8, top-p 0.9): every request's token stream is
// bit-identical whether it runs
//   (a) alone (the reference: one request at a time, no prefix cache),
//   (b) among 30 concurrent requests arriving at random steps,
//   (c) with its prompt prefix served from the cache,
//   (d) under a pool so small that requests are preempted and recomputed,
//   (e) with token budgets 16, 64 and 2048 (chunked prefills),
//   (f) with speculative decoding by prompt lookup (k 3 and 5, a small pool),
// for every KV cache format (engine/kv_cache.h), and for every weight format
// (bf16, fp16, int8: model_weights.h) with the fp32 cache.
#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/engine_core.h"
#include "tests/unit/engine/engine_test_util.h"
#include "tests/unit/scheduler/scheduler_test_util.h"

namespace kvserve::scheduler {
namespace {

using testing::Collector;

struct Job {
  RequestParams params;
  int arrival_step = 0;
};

// 30 requests; prompts of 5..70 tokens, most built on one of 3 shared
// prefixes (33..48 tokens), so prefix-cache hits happen.
std::vector<Job> MakeJobs(bool seeded, uint32_t seed) {
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 3; ++i) prefixes.push_back(testing::RandomPrompt(rng, uniform(33, 48), 256));
  std::vector<Job> jobs;
  for (int i = 0; i < 30; ++i) {
    Job j;
    if (i % 5 != 0) j.params.prompt_tokens = prefixes[i % 3];
    const auto suffix = testing::RandomPrompt(rng, uniform(5, 22), 256);
    j.params.prompt_tokens.insert(j.params.prompt_tokens.end(), suffix.begin(), suffix.end());
    j.params.stop.max_tokens = uniform(6, 24);
    j.params.stop.ignore_eos = i % 2 == 0;
    if (seeded) {
      j.params.sampling.temperature = 0.8f;
      j.params.sampling.top_p = 0.9f;
      j.params.sampling.seed = 1000 + i;
    } else {
      j.params.sampling.temperature = 0.0f;
    }
    j.arrival_step = uniform(0, 40);
    jobs.push_back(std::move(j));
  }
  return jobs;
}

EngineConfig Config(int32_t num_blocks, int32_t block_size, int32_t budget, bool prefix_cache) {
  EngineConfig c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.batch = {.max_num_batched_tokens = budget, .max_num_seqs = 64};
  c.enable_prefix_caching = prefix_cache;
  c.hash_key = HashKey{7, 7};
  return c;
}

struct RunResult {
  std::map<RequestId, Collector::Result> results;
  SchedulerStats stats;
};

// Runs jobs concurrently: job i is submitted before step arrival_step.
RunResult RunConcurrent(const engine::Model& model, const EngineConfig& config,
                        const std::vector<Job>& jobs, engine::KvCacheDtype dtype) {
  auto core = EngineCore::ForModel(model, config, dtype);
  Collector collector;
  size_t submitted = 0;
  std::vector<size_t> order(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return jobs[a].arrival_step < jobs[b].arrival_step; });
  for (int step = 0; step < 100000; ++step) {
    while (submitted < order.size() && jobs[order[submitted]].arrival_step <= step) {
      const size_t i = order[submitted++];
      const absl::Status s = core->AddRequest(static_cast<RequestId>(i), jobs[i].params,
                                              collector.For(static_cast<RequestId>(i)));
      EXPECT_TRUE(s.ok()) << s;
    }
    if (submitted == order.size() && !core->HasUnfinished()) break;
    core->Step();
    const absl::Status inv = core->kv().CheckInvariants();
    EXPECT_TRUE(inv.ok()) << inv;
  }
  EXPECT_TRUE(core->last_step_error().ok()) << core->last_step_error();
  EXPECT_EQ(core->kv().pool().Stats().num_in_use, 0);
  return {std::move(collector.results), core->Stats()};
}

// Runs jobs one after another in one core.
RunResult RunSequential(const engine::Model& model, const EngineConfig& config,
                        const std::vector<Job>& jobs, engine::KvCacheDtype dtype) {
  auto core = EngineCore::ForModel(model, config, dtype);
  Collector collector;
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_TRUE(core->AddRequest(static_cast<RequestId>(i), jobs[i].params,
                                 collector.For(static_cast<RequestId>(i)))
                    .ok());
    core->RunUntilIdle();
  }
  EXPECT_EQ(core->kv().pool().Stats().num_in_use, 0);
  return {std::move(collector.results), core->Stats()};
}

void ExpectSameTokens(const RunResult& ref, const RunResult& got, const char* what) {
  ASSERT_EQ(ref.results.size(), got.results.size()) << what;
  for (const auto& [id, r] : ref.results) {
    const Collector::Result& g = got.results.at(id);
    ASSERT_TRUE(g.finished) << what << " request " << id;
    EXPECT_EQ(g.tokens, r.tokens) << what << " request " << id;
    EXPECT_EQ(g.text, r.text) << what << " request " << id;
    EXPECT_EQ(g.final.finish_reason, r.final.finish_reason) << what << " request " << id;
  }
}

void CheckInvariance(const engine::Model& model, bool seeded, engine::KvCacheDtype dtype) {
  const std::vector<Job> jobs = MakeJobs(seeded, seeded ? 11 : 12);

  // (a) alone: one at a time, no prefix cache, a large budget.
  const RunResult alone = RunSequential(model, Config(256, 16, 2048, false), jobs, dtype);
  int64_t total_tokens = 0;
  std::set<std::vector<int32_t>> distinct;
  for (const auto& [id, r] : alone.results) {
    ASSERT_TRUE(r.finished);
    ASSERT_FALSE(r.tokens.empty());
    total_tokens += static_cast<int64_t>(r.tokens.size());
    distinct.insert(r.tokens);
  }
  EXPECT_GT(distinct.size(), 10u);  // the streams differ from one another

  // (b) 30 concurrent requests arriving at random steps.
  const RunResult concurrent = RunConcurrent(model, Config(256, 16, 2048, true), jobs, dtype);
  ExpectSameTokens(alone, concurrent, "concurrent");

  // (c) prefixes from the cache: one after another with the cache on, so
  // every request sharing a prefix with an earlier one hits.
  const RunResult cached = RunSequential(model, Config(256, 16, 2048, true), jobs, dtype);
  ExpectSameTokens(alone, cached, "prefix-cached");
  int hits = 0;
  for (size_t i = 4; i < jobs.size(); ++i) {  // 1, 2, 3 are each prefix's first
    if (i % 5 != 0) {
      EXPECT_GE(cached.results.at(i).final.usage.cached_prompt_tokens, 32) << "request " << i;
      hits += cached.results.at(i).final.usage.cached_prompt_tokens > 0 ? 1 : 0;
    }
  }
  EXPECT_GT(hits, 15);
  EXPECT_GT(cached.stats.kv.prefix_hit_tokens, 0);

  // (d) a pool of 9 usable blocks of 16 tokens for 30 requests of up to 93
  // tokens: preemption and recompute, all arriving at once, and with a
  // small block size too.
  std::vector<Job> at_once = jobs;
  for (Job& j : at_once) j.arrival_step = 0;
  const RunResult small_pool = RunConcurrent(model, Config(10, 16, 2048, true), at_once, dtype);
  ExpectSameTokens(alone, small_pool, "small pool");
  EXPECT_GT(small_pool.stats.num_preemptions, 0);
  const RunResult small_blocks = RunConcurrent(model, Config(40, 4, 64, true), jobs, dtype);
  ExpectSameTokens(alone, small_blocks, "small pool, block size 4");
  EXPECT_GT(small_blocks.stats.num_preemptions, 0);

  // (e) token budgets.
  for (int32_t budget : {16, 64, 2048}) {
    const RunResult r = RunConcurrent(model, Config(256, 16, budget, true), jobs, dtype);
    ExpectSameTokens(alone, r,
                     budget == 16   ? "budget 16"
                     : budget == 64 ? "budget 64"
                                    : "budget 2048");
  }
  // (f) speculative decoding by prompt lookup: drafts computed after each
  // decoding request's last token (chunks of 1 + k positions) and kept where
  // its own sampler draws them; with the budget cutting drafts, and under
  // preemption.
  EngineConfig speculative = Config(256, 16, 2048, true);
  speculative.speculative = {.num_tokens = 3, .ngram_min = 1, .ngram_max = 3, .max_batch = 64};
  const RunResult spec = RunConcurrent(model, speculative, jobs, dtype);
  ExpectSameTokens(alone, spec, "speculative k=3");
  EXPECT_GT(spec.stats.spec_drafts, 0);
  speculative = Config(10, 16, 16, true);
  speculative.speculative = {.num_tokens = 5, .ngram_min = 1, .ngram_max = 2, .max_batch = 64};
  const RunResult spec_small = RunConcurrent(model, speculative, at_once, dtype);
  ExpectSameTokens(alone, spec_small, "speculative k=5, small pool, budget 16");
  EXPECT_GT(spec_small.stats.num_preemptions, 0);
  std::printf("%s %s %s: speculation kept %lld of %lld drafts (k=3), %lld of %lld (k=5)\n",
              model.name.c_str(), engine::KvCacheDtypeName(dtype).c_str(),
              seeded ? "seeded" : "greedy", static_cast<long long>(spec.stats.spec_accepted_tokens),
              static_cast<long long>(spec.stats.spec_draft_tokens),
              static_cast<long long>(spec_small.stats.spec_accepted_tokens),
              static_cast<long long>(spec_small.stats.spec_draft_tokens));
  std::printf("%s %s %s: %lld tokens; preemptions: %lld (pool 9x16), %lld (pool 39x4)\n",
              model.name.c_str(), engine::KvCacheDtypeName(dtype).c_str(),
              seeded ? "seeded" : "greedy", static_cast<long long>(total_tokens),
              static_cast<long long>(small_pool.stats.num_preemptions),
              static_cast<long long>(small_blocks.stats.num_preemptions));
}

class EngineInvarianceTest
    : public ::testing::TestWithParam<std::tuple<std::string, engine::KvCacheDtype>> {
 protected:
  const engine::Model& model() const {
    return engine::testing::BuiltinModel(std::get<0>(GetParam()));
  }
  engine::KvCacheDtype dtype() const { return std::get<1>(GetParam()); }
};

TEST_P(EngineInvarianceTest, GreedyStreamsAreBitIdentical) {
  CheckInvariance(model(), false, dtype());
}
TEST_P(EngineInvarianceTest, SeededStreamsAreBitIdentical) {
  CheckInvariance(model(), true, dtype());
}

INSTANTIATE_TEST_SUITE_P(
    Models, EngineInvarianceTest,
    ::testing::Combine(::testing::ValuesIn(engine::testing::TinyModelsOfEveryFamily()),
                       ::testing::ValuesIn(kernels::kAllKvDtypes)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param);
      for (char& ch : name) ch = ch == '-' ? '_' : ch;
      return name + engine::testing::KvDtypeSuffix(std::get<1>(info.param));
    });

// 16-bit and int8 weights (engine_test_util.h): the same invariances, with
// the fp32 KV cache.
INSTANTIATE_TEST_SUITE_P(
    WeightFormats, EngineInvarianceTest,
    ::testing::Combine(::testing::ValuesIn(engine::testing::TinyModelsInWeightFormats()),
                       ::testing::Values(engine::KvCacheDtype::kFloat32)),
    [](const auto& info) { return engine::testing::TestNameOf(std::get<0>(info.param)); });

}  // namespace
}  // namespace kvserve::scheduler
