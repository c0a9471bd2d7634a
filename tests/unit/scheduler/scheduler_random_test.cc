// Randomized long runs of the whole scheduler (EngineCore over the hash
// model): thousands of events (submit with shared prefixes, salts,
// priorities and deadlines; abort at any stage; step), pools small enough to
// force preemption, random budgets and block sizes. After every event:
// KvCacheManager::CheckInvariants and the request accounting. At the end:
// zero blocks in use, every accepted request got exactly one final message,
// and every request that finished on its own produced exactly the tokens the
// hash model gives it alone with no cache (HashModelReference); aborted and
// expired ones produced a prefix of them.
#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/engine_core.h"
#include "tests/unit/scheduler/scheduler_test_util.h"

namespace kvserve::scheduler {
namespace {

using testing::Collector;
using testing::HashModelReference;
using testing::HashModelRunner;

constexpr int32_t kVocab = 64;
constexpr int32_t kEos = 63;

struct RunStats {
  int64_t preemptions = 0;
  int64_t finished = 0;
  int64_t aborted = 0;
  int64_t expired = 0;
  int64_t hit_tokens = 0;
};

RunStats RandomRun(uint32_t seed, int num_events) {
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  EngineConfig config;
  config.block_size = std::vector<int>{1, 2, 4, 8, 16}[uniform(0, 4)];
  config.num_blocks = uniform(48, 112) / config.block_size + 2;
  config.batch.max_num_batched_tokens = std::vector<int>{3, 8, 16, 64}[uniform(0, 3)];
  config.batch.max_num_seqs = std::vector<int>{2, 4, 8, 32}[uniform(0, 3)];
  config.batch.max_chunk_tokens = uniform(0, 1) ? 0 : 5;
  config.max_waiting_requests = 24;
  config.hash_key = HashKey{seed, 3};
  const ModelInfo info{.vocab_size = kVocab, .max_model_len = 512, .eos_token_ids = {kEos}};
  auto runner = std::make_unique<HashModelRunner>(config.num_blocks, config.block_size, kVocab);
  EngineCore core(config, info, std::move(runner));
  SCOPED_TRACE(::testing::Message()
               << "seed " << seed << " bs " << config.block_size << " blocks " << config.num_blocks
               << " budget " << config.batch.max_num_batched_tokens);

  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 3; ++i) prefixes.push_back(testing::RandomPrompt(rng, uniform(4, 24), 60));

  Collector collector;
  std::map<RequestId, RequestParams> accepted;
  RequestId next_id = 1;
  TimePoint now{};
  const int32_t usable_slots = (config.num_blocks - 1) * config.block_size;

  for (int event = 0; event < num_events; ++event) {
    const int kind = uniform(0, 99);
    if (kind < 30) {
      RequestParams p;
      if (uniform(0, 2) > 0) p.prompt_tokens = prefixes[uniform(0, 2)];
      const auto suffix = testing::RandomPrompt(rng, uniform(1, 12), 60);
      p.prompt_tokens.insert(p.prompt_tokens.end(), suffix.begin(), suffix.end());
      p.stop.max_tokens = uniform(1, 24);
      p.stop.ignore_eos = uniform(0, 3) == 0;
      if (uniform(0, 1)) {
        p.sampling.temperature = 0.0f;
      } else {
        p.sampling.temperature = 0.8f;
        p.sampling.top_p = 0.9f;
        p.sampling.seed = rng();
      }
      p.priority = uniform(-1, 1);
      p.cache_salt = uniform(0, 3) == 0 ? "salt" : "";
      if (uniform(0, 9) == 0) p.deadline = now + std::chrono::milliseconds(uniform(1, 40));
      const bool fits =
          static_cast<int32_t>(p.prompt_tokens.size()) + p.stop.max_tokens - 1 <= usable_slots;
      const RequestId id = next_id++;
      RejectReason reason{};
      const absl::Status s = core.AddRequest(id, p, collector.For(id), now, &reason);
      if (!fits) {
        EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      } else if (s.ok()) {
        accepted[id] = p;
      } else {
        EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
      }
    } else if (kind < 38) {
      // Abort anything: waiting, running, finished, or never seen.
      core.Abort(uniform(1, static_cast<int>(next_id) + 2), now);
    } else {
      now += std::chrono::milliseconds(1);
      core.Step(now);
    }
    const absl::Status inv = core.kv().CheckInvariants();
    if (!inv.ok()) {
      ADD_FAILURE() << "event " << event << ": " << inv;
      break;
    }
    const SchedulerStats st = core.Stats();
    int unfinished = 0;
    for (const auto& [id, p] : accepted) unfinished += collector.results[id].finished ? 0 : 1;
    EXPECT_EQ(st.num_running + st.num_waiting, unfinished) << "event " << event;
    EXPECT_EQ(core.kv().num_tracked_requests(), st.num_running) << "event " << event;
    EXPECT_LE(st.last_step_tokens, config.batch.max_num_batched_tokens);
    EXPECT_LE(st.last_step_seqs, config.batch.max_num_seqs);
  }
  for (int i = 0; i < 100000 && core.HasUnfinished(); ++i) core.Step(now);
  EXPECT_FALSE(core.HasUnfinished());
  EXPECT_TRUE(core.kv().CheckInvariants().ok());
  EXPECT_EQ(core.kv().pool().Stats().num_in_use, 0);

  RunStats out;
  for (const auto& [id, p] : accepted) {
    const Collector::Result& r = collector.results[id];
    if (!r.finished) {
      ADD_FAILURE() << "request " << id << " never finished";
      continue;
    }
    const std::vector<int32_t> eos = {kEos};
    const std::vector<int32_t> ref = HashModelReference(p, kVocab, eos);
    switch (r.final.finish_reason) {
      case FinishReason::kLength:
      case FinishReason::kStopToken:
        EXPECT_EQ(r.tokens, ref) << "request " << id;
        ++out.finished;
        break;
      case FinishReason::kAborted:
      case FinishReason::kExpired:
        EXPECT_TRUE(r.tokens.size() <= ref.size() &&
                    std::equal(r.tokens.begin(), r.tokens.end(), ref.begin()))
            << "request " << id;
        ++(r.final.finish_reason == FinishReason::kAborted ? out.aborted : out.expired);
        break;
      default:
        ADD_FAILURE() << "request " << id << ": " << FinishReasonName(r.final.finish_reason);
    }
    EXPECT_EQ(r.final.usage.completion_tokens, static_cast<int32_t>(r.tokens.size()));
  }
  out.preemptions = core.Stats().num_preemptions;
  out.hit_tokens = core.Stats().kv.prefix_hit_tokens;
  return out;
}

TEST(SchedulerRandomTest, LongRunsKeepEveryInvariant) {
  RunStats total;
  for (uint32_t seed = 1; seed <= 16; ++seed) {
    const RunStats s = RandomRun(seed, 2500);
    total.preemptions += s.preemptions;
    total.finished += s.finished;
    total.aborted += s.aborted;
    total.expired += s.expired;
    total.hit_tokens += s.hit_tokens;
    if (::testing::Test::HasFailure()) break;
  }
  // The runs must actually exercise what they claim to.
  EXPECT_GT(total.preemptions, 20);
  EXPECT_GT(total.finished, 100);
  EXPECT_GT(total.aborted, 10);
  EXPECT_GT(total.expired, 3);
  EXPECT_GT(total.hit_tokens, 100);
  std::printf(
      "random runs: %lld finished, %lld aborted, %lld expired, %lld preemptions, %lld hit tokens\n",
      static_cast<long long>(total.finished), static_cast<long long>(total.aborted),
      static_cast<long long>(total.expired), static_cast<long long>(total.preemptions),
      static_cast<long long>(total.hit_tokens));
}

}  // namespace
}  // namespace kvserve::scheduler
