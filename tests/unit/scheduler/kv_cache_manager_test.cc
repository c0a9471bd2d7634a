// KvCacheManager scenarios with exact block ids: a pool of 8 blocks (null
// block 0, usable 1..7) of 4 tokens each.
#include "scheduler/kv_cache_manager.h"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

using Tokens = std::vector<int32_t>;

// Tokens first, first+1, ..., n of them.
Tokens Seq(int32_t first, int32_t n) {
  Tokens t;
  for (int32_t i = 0; i < n; ++i) t.push_back(first + i);
  return t;
}

Tokens Cat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class KvCacheManagerTest : public ::testing::Test {
 protected:
  explicit KvCacheManagerTest(bool prefix_caching = true)
      : kv_({.num_blocks = 8,
             .block_size = 4,
             .enable_prefix_caching = prefix_caching,
             .hash_key = HashKey{0x1234, 0x5678}}) {}

  // Admits a request as the scheduler would: lookup, then allocate slots for
  // its whole prompt, then (on success) pretend the step computed it all.
  // Returns the lookup's cached token count, or -1 if allocation failed.
  int32_t Admit(RequestId id, const Tokens& prompt, std::string_view salt = "") {
    const CachedPrefix prefix = kv_.GetComputedBlocks(prompt, {.cache_salt = salt});
    const int32_t n = static_cast<int32_t>(prompt.size()) - prefix.num_tokens;
    if (!kv_.AllocateNew(id, prefix, n)) return -1;
    kv_.CommitComputed(id, prompt, static_cast<int32_t>(prompt.size()));
    return prefix.num_tokens;
  }

  std::vector<BlockId> Table(RequestId id) {
    std::span<const BlockId> t = kv_.BlockTable(id);
    return {t.begin(), t.end()};
  }
  std::vector<BlockId> Hits(const Tokens& tokens, std::string_view salt = "") {
    return kv_.GetComputedBlocks(tokens, {.cache_salt = salt}).blocks;
  }
  std::vector<BlockId> FreeList() { return kv_.pool().FreeListForTesting(); }
  int32_t Ref(BlockId b) { return kv_.pool().ref_count(b); }
  void ExpectInvariants() {
    const absl::Status s = kv_.CheckInvariants();
    EXPECT_TRUE(s.ok()) << s;
  }

  KvCacheManager kv_;
};

class KvCacheManagerNoCachingTest : public KvCacheManagerTest {
 protected:
  KvCacheManagerNoCachingTest() : KvCacheManagerTest(false) {}
};

const Tokens kP8 = Seq(100, 8);  // a shared 2-block prefix

// A free-cached prefix block leaves the free list when referenced; one still
// held by a running request does not.
TEST_F(KvCacheManagerTest, FreeBlocksAfterReferencingCountsOnlyFreeCachedHits) {
  EXPECT_EQ(Admit(1, Cat(kP8, {1, 2})), 0);  // blocks 1, 2 (the prefix), 3
  EXPECT_EQ(kv_.num_free_blocks(), 4);
  const CachedPrefix held = kv_.GetComputedBlocks(Cat(kP8, {7}), {});
  ASSERT_THAT(held.blocks, ElementsAre(1, 2));
  EXPECT_EQ(kv_.FreeBlocksAfterReferencing(held), 4);  // both in use by request 1

  kv_.Free(1);  // 1 and 2 stay cached on the free list
  EXPECT_EQ(kv_.num_free_blocks(), 7);
  const CachedPrefix cached = kv_.GetComputedBlocks(Cat(kP8, {7}), {});
  ASSERT_THAT(cached.blocks, ElementsAre(1, 2));
  EXPECT_EQ(kv_.FreeBlocksAfterReferencing(cached), 5);
  ASSERT_TRUE(kv_.AllocateNew(2, cached, 1));
  EXPECT_EQ(kv_.num_free_blocks(), 4);  // 5 left after the revival, less one new block
  ExpectInvariants();
}

TEST_F(KvCacheManagerTest, TwoRequestsShareTheFullBlocksOfACommonPrefix) {
  EXPECT_EQ(Admit(1, Cat(kP8, {1, 2})), 0);
  EXPECT_THAT(Table(1), ElementsAre(1, 2, 3));
  EXPECT_EQ(Admit(2, Cat(kP8, {3, 4, 5})), 8);
  EXPECT_THAT(Table(2), ElementsAre(1, 2, 4));
  EXPECT_EQ(Ref(1), 2);
  EXPECT_EQ(Ref(2), 2);
  EXPECT_EQ(Ref(3), 1);
  EXPECT_EQ(Ref(4), 1);
  ExpectInvariants();
  const KvCacheStats s = kv_.Stats();
  EXPECT_EQ(s.prefix_queries, 2);
  EXPECT_EQ(s.prefix_queried_tokens, 10 + 11);
  EXPECT_EQ(s.prefix_hit_tokens, 8);
  EXPECT_EQ(s.pool.num_in_use, 4);
  EXPECT_EQ(s.pool.num_cached, 2);  // 1, 2; the partial blocks 3, 4 are not
}

TEST_F(KvCacheManagerTest, FreeingARequestWithSharedBlocksKeepsThemForTheOther) {
  ASSERT_EQ(Admit(1, Cat(kP8, {1, 2})), 0);     // 1 2 3
  ASSERT_EQ(Admit(2, Cat(kP8, {3, 4, 5})), 8);  // 1 2 4
  kv_.Free(1);
  EXPECT_FALSE(kv_.Contains(1));
  EXPECT_EQ(Ref(1), 1);
  EXPECT_EQ(Ref(2), 1);
  EXPECT_THAT(FreeList(), ElementsAre(5, 6, 7, 3));  // only 1's own block
  ExpectInvariants();
  kv_.Free(2);
  EXPECT_THAT(FreeList(), ElementsAre(5, 6, 7, 3, 4, 2, 1));
  const BlockPoolStats s = kv_.Stats().pool;
  EXPECT_EQ(s.num_in_use, 0);
  EXPECT_EQ(s.num_free_cached, 2);
  EXPECT_EQ(s.num_free_uncached, 5);
  ExpectInvariants();
}

TEST_F(KvCacheManagerTest, TailFirstFreeingLetsThePrefixOutliveTheSuffix) {
  const Tokens prompt = Seq(100, 13);  // 3 full blocks + 1 token
  ASSERT_EQ(Admit(1, prompt), 0);
  EXPECT_THAT(Table(1), ElementsAre(1, 2, 3, 4));
  kv_.Free(1);
  EXPECT_THAT(FreeList(), ElementsAre(5, 6, 7, 4, 3, 2, 1));
  // 4 new blocks: 5 6 7, then the freed table's tail end 4 (uncached) and 3
  // (the prefix's third block).
  ASSERT_EQ(Admit(2, Seq(500, 16)), 0);
  EXPECT_THAT(Table(2), ElementsAre(5, 6, 7, 4));
  ASSERT_EQ(Admit(3, Seq(600, 1)), 0);
  EXPECT_THAT(Table(3), ElementsAre(3));
  EXPECT_EQ(kv_.Stats().pool.num_evicted, 1);
  // The first two blocks of the prefix are still served.
  EXPECT_THAT(Hits(prompt), ElementsAre(1, 2));
  ExpectInvariants();
}

TEST_F(KvCacheManagerTest, LeastRecentlyFreedBlocksAreReusedFirst) {
  ASSERT_EQ(Admit(1, Seq(100, 5)), 0);  // 1 2
  ASSERT_EQ(Admit(2, Seq(200, 5)), 0);  // 3 4
  ASSERT_EQ(Admit(3, Seq(300, 5)), 0);  // 5 6
  kv_.Free(2);
  kv_.Free(1);
  kv_.Free(3);
  EXPECT_THAT(FreeList(), ElementsAre(7, 4, 3, 2, 1, 6, 5));
  ASSERT_EQ(Admit(4, Seq(400, 12)), 0);
  EXPECT_THAT(Table(4), ElementsAre(7, 4, 3));
  // Request 2's cached block 3 is gone; 1's and 3's are still hit.
  EXPECT_THAT(Hits(Seq(200, 5)), IsEmpty());
  EXPECT_THAT(Hits(Seq(100, 5)), ElementsAre(1));
  EXPECT_THAT(Hits(Seq(300, 5)), ElementsAre(5));
  ExpectInvariants();
}

TEST_F(KvCacheManagerTest, FreedCachedBlocksAreHitUntilReallocated) {
  const Tokens prompt = Cat(kP8, {1});
  ASSERT_EQ(Admit(1, prompt), 0);  // 1 2 3
  kv_.Free(1);
  EXPECT_THAT(FreeList(), ElementsAre(4, 5, 6, 7, 3, 2, 1));
  EXPECT_EQ(kv_.Stats().pool.num_free_cached, 2);
  EXPECT_THAT(Hits(prompt), ElementsAre(1, 2));  // free, still findable

  ASSERT_EQ(Admit(2, Seq(500, 20)), 0);  // 5 blocks: 4 5 6 7 3
  EXPECT_THAT(Table(2), ElementsAre(4, 5, 6, 7, 3));
  EXPECT_THAT(Hits(prompt), ElementsAre(1, 2));
  ASSERT_EQ(Admit(3, Seq(600, 1)), 0);  // pops 2: its hash leaves the map
  EXPECT_THAT(Table(3), ElementsAre(2));
  EXPECT_THAT(Hits(prompt), ElementsAre(1));
  EXPECT_EQ(kv_.pool().hash(2), std::nullopt);
  EXPECT_EQ(kv_.Stats().pool.num_evicted, 1);

  // A hit on a free block takes it off the free list before new blocks are
  // popped.
  kv_.Free(2);
  EXPECT_THAT(FreeList(), ElementsAre(1, 3, 7, 6, 5, 4));
  EXPECT_EQ(Admit(4, prompt), 4);
  EXPECT_THAT(Table(4), ElementsAre(1, 3, 7));
  ExpectInvariants();
}

TEST_F(KvCacheManagerTest, SaltsSeparateEqualTokens) {
  const Tokens prompt = Cat(kP8, {1});
  ASSERT_EQ(Admit(1, prompt, "alice"), 0);  // 1 2 3
  EXPECT_EQ(Admit(2, prompt, "bob"), 0);    // 4 5 6
  EXPECT_THAT(Table(2), ElementsAre(4, 5, 6));
  EXPECT_THAT(Hits(prompt, "alice"), ElementsAre(1, 2));
  EXPECT_THAT(Hits(prompt, "bob"), ElementsAre(4, 5));
  EXPECT_THAT(Hits(prompt, "carol"), IsEmpty());
  EXPECT_THAT(Hits(prompt, ""), IsEmpty());
  ExpectInvariants();
}

TEST_F(KvCacheManagerTest, TheLastPromptTokenIsNeverServedFromTheCache) {
  ASSERT_EQ(Admit(1, Seq(100, 12)), 0);  // 3 full blocks, all cached
  EXPECT_EQ(kv_.Stats().pool.num_cached, 3);
  // A prompt of exactly 8 cached tokens gets 1 block: its 8th token must be
  // computed for the first output token's logits.
  EXPECT_THAT(Hits(Seq(100, 8)), ElementsAre(1));
  EXPECT_THAT(Hits(Seq(100, 9)), ElementsAre(1, 2));
  EXPECT_THAT(Hits(Seq(100, 12)), ElementsAre(1, 2));
  EXPECT_THAT(Hits(Seq(100, 13)), ElementsAre(1, 2, 3));
  EXPECT_THAT(Hits(Seq(100, 4)), IsEmpty());
  EXPECT_THAT(Hits(Seq(100, 1)), IsEmpty());
  EXPECT_THAT(Hits({}), IsEmpty());
  const CachedPrefix p = kv_.GetComputedBlocks(Seq(100, 8), {});
  EXPECT_EQ(p.num_tokens, 4);
}

TEST_F(KvCacheManagerTest, FailedAllocationLeavesEverythingUnchanged) {
  const Tokens prompt = Cat(kP8, {1});
  ASSERT_EQ(Admit(1, prompt), 0);  // 1 2 3
  kv_.Free(1);                     // 4 5 6 7 3 2 1
  ASSERT_EQ(Admit(2, Seq(500, 16)), 0);
  EXPECT_THAT(Table(2), ElementsAre(4, 5, 6, 7));
  ASSERT_THAT(FreeList(), ElementsAre(3, 2, 1));
  const BlockPoolStats before = kv_.Stats().pool;

  // Hits 1 2 (both free) + 3 new blocks > 3 free blocks.
  EXPECT_EQ(Admit(3, Cat(kP8, Seq(0, 9))), -1);
  // Hits 1 2 + 2 new blocks: still one too many.
  EXPECT_EQ(Admit(3, Cat(kP8, Seq(0, 5))), -1);
  // A running request cannot grow past the free blocks either.
  EXPECT_FALSE(kv_.Allocate(2, 16, 13));
  EXPECT_THAT(Table(2), ElementsAre(4, 5, 6, 7));

  EXPECT_FALSE(kv_.Contains(3));
  EXPECT_THAT(FreeList(), ElementsAre(3, 2, 1));
  const BlockPoolStats after = kv_.Stats().pool;
  EXPECT_EQ(after.num_free_cached, before.num_free_cached);
  EXPECT_EQ(after.num_free_uncached, before.num_free_uncached);
  EXPECT_EQ(after.num_in_use, before.num_in_use);
  EXPECT_EQ(after.num_evicted, before.num_evicted);
  EXPECT_THAT(Hits(prompt), ElementsAre(1, 2));
  ExpectInvariants();

  // Hits 1 2 + 1 new block fits exactly.
  EXPECT_EQ(Admit(3, Cat(kP8, Seq(0, 4))), 8);
  EXPECT_THAT(Table(3), ElementsAre(1, 2, 3));
  EXPECT_THAT(FreeList(), IsEmpty());
  EXPECT_TRUE(kv_.Allocate(2, 16, 0));  // nothing new needed
  ExpectInvariants();
}

TEST_F(KvCacheManagerTest, DecodeGrowsTheTableAndCachesBlocksAsTheyFill) {
  Tokens tokens = Seq(100, 3);
  ASSERT_EQ(Admit(1, tokens), 0);
  EXPECT_THAT(Table(1), ElementsAre(1));
  EXPECT_EQ(kv_.Stats().pool.num_cached, 0);
  // Decode: the sampled token 7 is computed next step, filling block 1.
  tokens.push_back(7);
  ASSERT_TRUE(kv_.Allocate(1, 3, 1));
  EXPECT_THAT(Table(1), ElementsAre(1));
  kv_.CommitComputed(1, tokens, 4);
  EXPECT_EQ(kv_.pool().hash(1).has_value(), true);
  tokens.push_back(8);
  ASSERT_TRUE(kv_.Allocate(1, 4, 1));
  EXPECT_THAT(Table(1), ElementsAre(1, 2));
  kv_.CommitComputed(1, tokens, 5);
  ExpectInvariants();
  // Output tokens are part of the cached prefix.
  EXPECT_THAT(Hits({100, 101, 102, 7, 9}), ElementsAre(1));
  EXPECT_THAT(Hits({100, 101, 102, 8, 9}), IsEmpty());
}

TEST_F(KvCacheManagerTest, ChunkedPrefillRegistersEachBlockOnce) {
  const Tokens prompt = Seq(100, 11);
  const CachedPrefix prefix = kv_.GetComputedBlocks(prompt, {});
  ASSERT_TRUE(kv_.AllocateNew(1, prefix, 3));  // chunk [0, 3)
  EXPECT_THAT(Table(1), ElementsAre(1));
  kv_.CommitComputed(1, prompt, 3);
  ASSERT_TRUE(kv_.Allocate(1, 3, 6));  // chunk [3, 9)
  EXPECT_THAT(Table(1), ElementsAre(1, 2, 3));
  kv_.CommitComputed(1, prompt, 9);
  EXPECT_EQ(kv_.Stats().pool.num_cached, 2);
  ASSERT_TRUE(kv_.Allocate(1, 9, 2));  // chunk [9, 11)
  kv_.CommitComputed(1, prompt, 11);
  EXPECT_EQ(kv_.Stats().pool.num_cached, 2);
  ExpectInvariants();
  // Equal to admitting the whole prompt in one go.
  EXPECT_EQ(Admit(2, prompt), 8);
  EXPECT_THAT(Table(2), ElementsAre(1, 2, 4));
}

TEST_F(KvCacheManagerTest, EqualContentComputedTwiceIsRegisteredOnce) {
  const Tokens prompt = Cat(kP8, {1});
  // Both look up before either has computed anything: both miss.
  const CachedPrefix p1 = kv_.GetComputedBlocks(prompt, {});
  ASSERT_TRUE(kv_.AllocateNew(1, p1, 9));
  const CachedPrefix p2 = kv_.GetComputedBlocks(prompt, {});
  ASSERT_TRUE(kv_.AllocateNew(2, p2, 9));
  EXPECT_THAT(Table(1), ElementsAre(1, 2, 3));
  EXPECT_THAT(Table(2), ElementsAre(4, 5, 6));
  kv_.CommitComputed(1, prompt, 9);
  kv_.CommitComputed(2, prompt, 9);
  // Request 2 keeps its own blocks; the cache knows request 1's.
  EXPECT_EQ(kv_.Stats().pool.num_cached, 2);
  EXPECT_EQ(kv_.pool().hash(4), std::nullopt);
  EXPECT_THAT(Hits(prompt), ElementsAre(1, 2));
  ExpectInvariants();

  // Once 1's copies are evicted, 2's copies take over when 2 is freed.
  kv_.Free(1);
  EXPECT_THAT(FreeList(), ElementsAre(7, 3, 2, 1));
  ASSERT_EQ(Admit(3, Seq(500, 16)), 0);
  EXPECT_THAT(Table(3), ElementsAre(7, 3, 2, 1));
  EXPECT_THAT(Hits(prompt), IsEmpty());
  kv_.Free(2);
  EXPECT_THAT(Hits(prompt), ElementsAre(4, 5));
  EXPECT_EQ(kv_.Stats().pool.num_free_cached, 2);
  ExpectInvariants();
}

TEST_F(KvCacheManagerTest, FreeingAnUntrackedRequestIsANoOp) {
  kv_.Free(99);
  EXPECT_THAT(Table(99), IsEmpty());
  EXPECT_EQ(kv_.num_tracked_requests(), 0);
  ExpectInvariants();
}

TEST_F(KvCacheManagerNoCachingTest, NothingIsCachedOrShared) {
  const Tokens prompt = Cat(kP8, {1});
  ASSERT_EQ(Admit(1, prompt), 0);
  EXPECT_EQ(Admit(2, prompt), 0);
  EXPECT_THAT(Table(2), ElementsAre(4, 5, 6));
  EXPECT_EQ(kv_.Stats().pool.num_cached, 0);
  kv_.Free(1);
  kv_.Free(2);
  EXPECT_THAT(Hits(prompt), IsEmpty());
  EXPECT_EQ(kv_.Stats().pool.num_free_uncached, 7);
  ExpectInvariants();
}

using KvCacheManagerDeathTest = KvCacheManagerTest;

TEST_F(KvCacheManagerDeathTest, AStalePrefixIsABug) {
  const Tokens prompt = Cat(kP8, {1});
  ASSERT_EQ(Admit(1, prompt), 0);
  kv_.Free(1);
  const CachedPrefix stale = kv_.GetComputedBlocks(prompt, {});
  ASSERT_EQ(stale.num_tokens, 8);
  ASSERT_EQ(Admit(2, Seq(500, 28)), 0);  // takes every block, evicting 1 and 2
  kv_.Free(2);
  EXPECT_DEATH((void)kv_.AllocateNew(3, stale, 1), "KVSERVE_CHECK failed");
}

}  // namespace
}  // namespace kvserve::scheduler
