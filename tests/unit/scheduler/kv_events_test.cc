// KV-cache events from the block pool's transitions: exact events for small
// scenarios (a pool of 8 blocks of 4 tokens), the chain rule (a parent is
// cached whenever a child is stored), and long randomized engine runs whose
// replayed events must equal the pool's cached set after every step.
#include "scheduler/kv_events.h"

#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/block_pool.h"
#include "scheduler/engine_core.h"
#include "scheduler/kv_cache_manager.h"
#include "tests/unit/scheduler/scheduler_test_util.h"

namespace kvserve::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Tokens = std::vector<int32_t>;

Tokens Seq(int32_t first, int32_t n) {
  Tokens t;
  for (int32_t i = 0; i < n; ++i) t.push_back(first + i);
  return t;
}

BlockHash H(uint64_t lo) { return BlockHash{.lo = lo, .hi = ~lo}; }

// A consumer's view: the cached ids, rebuilt from events, with the chain
// rule and the removal rule checked on the way.
struct Replica {
  std::set<uint64_t> cached;
  std::vector<std::string> errors;

  void Apply(const KvEventBatch& batch) {
    for (const KvEvent& e : batch.events) {
      if (const auto* s = std::get_if<BlockStoredEvent>(&e)) {
        if (s->token_ids.size() != s->block_ids.size() * static_cast<size_t>(s->block_size)) {
          errors.push_back("token count");
        }
        std::optional<uint64_t> parent = s->parent_block_id;
        for (uint64_t id : s->block_ids) {
          if (parent.has_value() && !cached.contains(*parent)) {
            errors.push_back("stored " + std::to_string(id) + " before its parent");
          }
          if (!cached.insert(id).second) errors.push_back("stored twice " + std::to_string(id));
          parent = id;
        }
      } else if (const auto* r = std::get_if<BlockRemovedEvent>(&e)) {
        for (uint64_t id : r->block_ids) {
          if (cached.erase(id) == 0) errors.push_back("removed unknown " + std::to_string(id));
        }
      } else {
        cached.clear();
      }
    }
  }
};

std::set<uint64_t> PoolCachedIds(const BlockPool& pool) {
  std::set<uint64_t> ids;
  for (BlockId b = 1; b < pool.num_blocks(); ++b) {
    if (std::optional<BlockHash> h = pool.hash(b)) ids.insert(ExternalBlockId(*h));
  }
  return ids;
}

TEST(KvEventRecorderTest, PoolTransitionsBecomeEventsInOrder) {
  BlockPool pool(4, 2);  // usable blocks 1..3
  KvEventRecorder rec(2);
  pool.SetEventRecorder(&rec);
  std::vector<BlockId> table;
  ASSERT_TRUE(pool.Allocate(3, &table));
  const Tokens a = {10, 11}, b = {12, 13}, c = {20, 21};
  ASSERT_TRUE(pool.RegisterHash(1, H(100), {.tokens = a}));
  ASSERT_TRUE(pool.RegisterHash(2, H(101), {.parent = H(100), .tokens = b}));
  // Idempotent, and a duplicate hash: no event.
  ASSERT_TRUE(pool.RegisterHash(1, H(100), {.tokens = a}));
  ASSERT_FALSE(pool.RegisterHash(3, H(101), {.parent = H(100), .tokens = b}));
  // Not a child of 101: a new event, with the salt.
  ASSERT_TRUE(pool.RegisterHash(3, H(200), {.tokens = c, .cache_salt = "s"}));

  KvEventBatch first = rec.TakeBatch(5.0);
  EXPECT_EQ(first.timestamp_s, 5.0);
  ASSERT_EQ(first.events.size(), 2u);
  EXPECT_EQ(std::get<BlockStoredEvent>(first.events[0]),
            (BlockStoredEvent{.block_ids = {100, 101},
                              .parent_block_id = std::nullopt,
                              .token_ids = {10, 11, 12, 13},
                              .block_size = 2}));
  EXPECT_EQ(std::get<BlockStoredEvent>(first.events[1]),
            (BlockStoredEvent{.block_ids = {200},
                              .parent_block_id = std::nullopt,
                              .token_ids = {20, 21},
                              .block_size = 2,
                              .cache_salt = "s"}));
  EXPECT_TRUE(rec.empty());

  // In use: no reset, no event.
  EXPECT_FALSE(pool.ResetCache());
  EXPECT_TRUE(rec.empty());
  // Freed last-first: free list 3, 2, 1; two allocations evict 3 then 2.
  pool.ReleaseTable(table);
  std::vector<BlockId> more;
  ASSERT_TRUE(pool.Allocate(2, &more));
  EXPECT_THAT(more, ElementsAre(3, 2));
  pool.ReleaseTable(more);
  ASSERT_TRUE(pool.ResetCache());
  EXPECT_EQ(pool.Stats().num_cached, 0);
  KvEventBatch second = rec.TakeBatch(6.0);
  ASSERT_EQ(second.events.size(), 2u);
  EXPECT_EQ(std::get<BlockRemovedEvent>(second.events[0]).block_ids,
            (std::vector<uint64_t>{200, 101}));
  EXPECT_TRUE(std::holds_alternative<AllBlocksClearedEvent>(second.events[1]));
  EXPECT_TRUE(pool.CheckInvariants({}).ok());
}

class KvEventsManagerTest : public ::testing::Test {
 protected:
  KvEventsManagerTest()
      : kv_({.num_blocks = 8,
             .block_size = 4,
             .hash_key = HashKey{0x1234, 0x5678},
             .enable_kv_events = true}) {}

  // Admits `id` with its cached prefix and computes all of `tokens`.
  void Run(RequestId id, const Tokens& tokens) {
    CachedPrefix prefix = kv_.GetComputedBlocks(tokens, {});
    ASSERT_TRUE(
        kv_.AllocateNew(id, prefix, static_cast<int32_t>(tokens.size()) - prefix.num_tokens));
    kv_.CommitComputed(id, tokens, static_cast<int32_t>(tokens.size()));
  }
  std::vector<KvEvent> Take() { return kv_.events()->TakeBatch(0).events; }

  KvCacheManager kv_;
};

TEST_F(KvEventsManagerTest, SharedPrefixNamesItsParent) {
  const Tokens a = Seq(0, 13);  // 3 full blocks
  Run(1, a);
  std::vector<KvEvent> events = Take();
  ASSERT_EQ(events.size(), 1u);
  const BlockStoredEvent first = std::get<BlockStoredEvent>(events[0]);
  EXPECT_EQ(first.parent_block_id, std::nullopt);
  EXPECT_EQ(first.token_ids, Seq(0, 12));
  ASSERT_EQ(first.block_ids.size(), 3u);

  // Shares two blocks, then diverges: its third block's parent is a's second.
  Tokens b = Seq(0, 8);
  for (int32_t t : Seq(50, 5)) b.push_back(t);
  Run(2, b);
  events = Take();
  ASSERT_EQ(events.size(), 1u);
  const BlockStoredEvent second = std::get<BlockStoredEvent>(events[0]);
  EXPECT_EQ(second.parent_block_id, first.block_ids[1]);
  EXPECT_EQ(second.token_ids, Seq(50, 4));
  EXPECT_EQ(second.block_ids.size(), 1u);
  EXPECT_EQ(PoolCachedIds(kv_.pool()).size(), 4u);
}

// Two requests compute the same prompt side by side: the second's blocks
// stay unregistered (duplicates). When the first's copies are evicted, the
// second's become the cached ones, parents first, announced as stored.
TEST_F(KvEventsManagerTest, DuplicateCopiesTakeOverParentsFirst) {
  const Tokens p = Seq(0, 8);  // 2 full blocks, the second never a prefix hit
  CachedPrefix none1 = kv_.GetComputedBlocks(p, {});
  CachedPrefix none2 = kv_.GetComputedBlocks(p, {});
  ASSERT_TRUE(kv_.AllocateNew(1, none1, 8));
  ASSERT_TRUE(kv_.AllocateNew(2, none2, 8));
  kv_.CommitComputed(1, p, 8);
  kv_.CommitComputed(2, p, 8);  // equal hashes: not registered
  Replica replica;
  replica.Apply(kv_.events()->TakeBatch(0));
  EXPECT_EQ(replica.cached.size(), 2u);

  kv_.Free(1);  // its blocks free-cached, at the LRU tail
  Tokens filler = Seq(100, 12);
  CachedPrefix none3 = kv_.GetComputedBlocks(filler, {});
  ASSERT_TRUE(kv_.AllocateNew(3, none3, 12));  // 3 free-uncached blocks
  ASSERT_TRUE(kv_.Allocate(3, 12, 8));         // 2 more: evicts request 1's blocks
  replica.Apply(kv_.events()->TakeBatch(0));
  EXPECT_THAT(replica.cached, IsEmpty());

  kv_.Free(2);  // its copies become findable, block 0 first
  KvEventBatch batch = kv_.events()->TakeBatch(0);
  replica.Apply(batch);
  EXPECT_THAT(replica.errors, IsEmpty());
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_EQ(std::get<BlockStoredEvent>(batch.events[0]).token_ids, p);
  EXPECT_EQ(replica.cached, PoolCachedIds(kv_.pool()));
  EXPECT_TRUE(kv_.CheckInvariants().ok());
}

TEST_F(KvEventsManagerTest, ResetClearsOnlyWhenNothingIsHeld) {
  Run(1, Seq(0, 9));
  EXPECT_FALSE(kv_.ResetPrefixCache());
  kv_.Free(1);
  ASSERT_TRUE(kv_.ResetPrefixCache());
  std::vector<KvEvent> events = Take();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<BlockStoredEvent>(events[0]));
  EXPECT_TRUE(std::holds_alternative<AllBlocksClearedEvent>(events[1]));
  EXPECT_THAT(PoolCachedIds(kv_.pool()), IsEmpty());
  // The cleared blocks are uncached now: no BlockRemoved when reused.
  Run(2, Seq(40, 4));
  for (const KvEvent& e : Take()) EXPECT_FALSE(std::holds_alternative<BlockRemovedEvent>(e));
}

TEST(KvEventsOffTest, NoRecorderWithoutTheOption) {
  KvCacheManager kv({.num_blocks = 8, .block_size = 4});
  EXPECT_EQ(kv.events(), nullptr);
}

// Whole-engine runs over shared prefixes in a small pool (heavy eviction and
// preemption): after every step the replayed events equal the pool's cached
// ids, every stored block's parent was cached, and every stored block's
// tokens are that block of some request's tokens.
TEST(KvEventsEngineTest, ReplayMatchesThePoolAfterEveryStep) {
  constexpr int32_t kVocab = 60;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    EngineConfig config;
    config.block_size = std::vector<int>{1, 2, 4, 8}[uniform(0, 3)];
    config.num_blocks = uniform(40, 90) / config.block_size + 2;
    config.batch.max_num_batched_tokens = std::vector<int>{4, 16, 64}[uniform(0, 2)];
    config.batch.max_num_seqs = std::vector<int>{2, 8, 32}[uniform(0, 2)];
    config.hash_key = HashKey{seed, 7};
    config.enable_kv_events = true;
    const ModelInfo info{.vocab_size = kVocab, .max_model_len = 512, .eos_token_ids = {}};
    EngineCore core(
        config, info,
        std::make_unique<testing::HashModelRunner>(config.num_blocks, config.block_size, kVocab));
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " bs " << config.block_size);

    std::vector<Tokens> prefixes;
    for (int i = 0; i < 3; ++i)
      prefixes.push_back(testing::RandomPrompt(rng, uniform(4, 30), kVocab));
    testing::Collector collector;
    std::vector<Tokens> prompts;
    Replica replica;
    std::vector<Tokens> stored_block_tokens;
    const int32_t usable_slots = (config.num_blocks - 1) * config.block_size;
    for (int event = 0; event < 300; ++event) {
      if (uniform(0, 2) == 0) {
        RequestParams p;
        p.prompt_tokens = prefixes[uniform(0, 2)];
        Tokens suffix = testing::RandomPrompt(rng, uniform(1, 10), kVocab);
        p.prompt_tokens.insert(p.prompt_tokens.end(), suffix.begin(), suffix.end());
        p.stop.max_tokens = uniform(1, 12);
        p.stop.ignore_eos = true;
        if (static_cast<int32_t>(p.prompt_tokens.size()) + p.stop.max_tokens > usable_slots) {
          continue;
        }
        const RequestId id = static_cast<RequestId>(prompts.size()) + 1;
        prompts.push_back(p.prompt_tokens);
        ASSERT_TRUE(core.AddRequest(id, std::move(p), collector.For(id)).ok());
      }
      core.Step();
      KvEventBatch batch = core.TakeKvEvents(static_cast<double>(event));
      for (const KvEvent& e : batch.events) {
        if (const auto* s = std::get_if<BlockStoredEvent>(&e)) {
          for (size_t i = 0; i < s->block_ids.size(); ++i) {
            stored_block_tokens.emplace_back(s->token_ids.begin() + i * s->block_size,
                                             s->token_ids.begin() + (i + 1) * s->block_size);
          }
        }
      }
      replica.Apply(batch);
      ASSERT_THAT(replica.errors, IsEmpty());
      ASSERT_EQ(replica.cached, PoolCachedIds(core.kv().pool()));
      ASSERT_TRUE(core.kv().CheckInvariants().ok());
    }
    core.RunUntilIdle();
    replica.Apply(core.TakeKvEvents(0));
    EXPECT_THAT(replica.errors, IsEmpty());
    EXPECT_EQ(replica.cached, PoolCachedIds(core.kv().pool()));
    // Every stored block is a block-aligned chunk of some request's tokens.
    std::set<Tokens> chunks;
    for (size_t i = 0; i < prompts.size(); ++i) {
      Tokens all = prompts[i];
      const Tokens& out = collector.results[static_cast<RequestId>(i) + 1].tokens;
      all.insert(all.end(), out.begin(), out.end());
      for (size_t j = 0; j + config.block_size <= all.size(); j += config.block_size) {
        chunks.emplace(all.begin() + j, all.begin() + j + config.block_size);
      }
    }
    for (const Tokens& t : stored_block_tokens) EXPECT_TRUE(chunks.contains(t));
    EXPECT_FALSE(stored_block_tokens.empty());
    EXPECT_GT(core.Stats().kv.pool.num_evicted, 0) << "the pool is meant to be small";
  }
}

}  // namespace
}  // namespace kvserve::scheduler
