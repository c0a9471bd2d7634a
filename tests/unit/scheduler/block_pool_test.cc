// BlockPool on its own: exact block ids, free-list orders and counts for
// small pools (8 blocks: the null block 0 and usable blocks 1..7).
#include "scheduler/block_pool.h"

#include <span>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr BlockHash kH1{1, 1};
constexpr BlockHash kH2{2, 2};

absl::Status Check(const BlockPool& pool, std::vector<std::vector<BlockId>> tables) {
  std::vector<std::span<const BlockId>> spans(tables.begin(), tables.end());
  return pool.CheckInvariants(spans);
}

TEST(BlockPoolTest, StartsWithEveryUsableBlockFreeInIdOrder) {
  BlockPool pool(8, 4);
  EXPECT_THAT(pool.FreeListForTesting(), ElementsAre(1, 2, 3, 4, 5, 6, 7));
  const BlockPoolStats s = pool.Stats();
  EXPECT_EQ(s.num_blocks, 8);
  EXPECT_EQ(s.num_free_uncached, 7);
  EXPECT_EQ(s.num_free_cached, 0);
  EXPECT_EQ(s.num_in_use, 0);
  EXPECT_TRUE(Check(pool, {}).ok());
}

TEST(BlockPoolTest, AllocatesFromTheHeadAllOrNothingAndNeverTheNullBlock) {
  BlockPool pool(8, 4);
  std::vector<BlockId> a;
  ASSERT_TRUE(pool.Allocate(3, &a));
  EXPECT_THAT(a, ElementsAre(1, 2, 3));

  std::vector<BlockId> b = {42};
  EXPECT_FALSE(pool.Allocate(5, &b));
  EXPECT_THAT(b, ElementsAre(42));  // untouched
  EXPECT_THAT(pool.FreeListForTesting(), ElementsAre(4, 5, 6, 7));

  b.clear();
  ASSERT_TRUE(pool.Allocate(4, &b));
  EXPECT_THAT(b, ElementsAre(4, 5, 6, 7));
  EXPECT_TRUE(pool.Allocate(0, &b));
  EXPECT_FALSE(pool.Allocate(1, &b));
  EXPECT_EQ(pool.Stats().num_in_use, 7);
  EXPECT_TRUE(Check(pool, {a, b}).ok());
}

TEST(BlockPoolTest, OnlyTheNullBlockMeansNothingToHandOut) {
  BlockPool pool(1, 4);
  std::vector<BlockId> t;
  EXPECT_FALSE(pool.Allocate(1, &t));
  EXPECT_TRUE(Check(pool, {}).ok());
}

TEST(BlockPoolTest, ReleasesATableLastBlockFirst) {
  BlockPool pool(8, 4);
  std::vector<BlockId> t;
  ASSERT_TRUE(pool.Allocate(7, &t));
  pool.ReleaseTable(t);
  EXPECT_THAT(pool.FreeListForTesting(), ElementsAre(7, 6, 5, 4, 3, 2, 1));
  std::vector<BlockId> next;
  ASSERT_TRUE(pool.Allocate(1, &next));
  EXPECT_THAT(next, ElementsAre(7));  // the freed table's last block goes first
}

TEST(BlockPoolTest, ReusesLeastRecentlyFreedFirst) {
  BlockPool pool(8, 4);
  std::vector<BlockId> a, b;
  ASSERT_TRUE(pool.Allocate(2, &a));  // 1 2
  ASSERT_TRUE(pool.Allocate(2, &b));  // 3 4
  pool.ReleaseTable(a);
  pool.ReleaseTable(b);
  EXPECT_THAT(pool.FreeListForTesting(), ElementsAre(5, 6, 7, 2, 1, 4, 3));
  std::vector<BlockId> c;
  ASSERT_TRUE(pool.Allocate(5, &c));
  EXPECT_THAT(c, ElementsAre(5, 6, 7, 2, 1));
}

TEST(BlockPoolTest, NullEntriesInATableAreIgnored) {
  BlockPool pool(8, 4);
  std::vector<BlockId> t = {kNullBlockId};
  ASSERT_TRUE(pool.Allocate(1, &t));
  EXPECT_TRUE(Check(pool, {t}).ok());
  pool.ReleaseTable(t);
  EXPECT_EQ(pool.num_free_blocks(), 7);
}

TEST(BlockPoolTest, FreedCachedBlockStaysFindableUntilReallocated) {
  BlockPool pool(8, 4);
  std::vector<BlockId> t;
  ASSERT_TRUE(pool.Allocate(1, &t));  // 1
  ASSERT_TRUE(pool.RegisterHash(1, kH1));
  pool.ReleaseTable(t);
  EXPECT_THAT(pool.FreeListForTesting(), ElementsAre(2, 3, 4, 5, 6, 7, 1));
  EXPECT_EQ(pool.Lookup(kH1), 1);
  EXPECT_EQ(pool.Stats().num_free_cached, 1);
  EXPECT_EQ(pool.Stats().num_free_uncached, 6);

  std::vector<BlockId> u;
  ASSERT_TRUE(pool.Allocate(6, &u));  // 2..7: block 1 survives
  EXPECT_EQ(pool.Lookup(kH1), 1);
  ASSERT_TRUE(pool.Allocate(1, &u));  // now block 1 is reused: its hash goes
  EXPECT_EQ(u.back(), 1);
  EXPECT_EQ(pool.Lookup(kH1), std::nullopt);
  EXPECT_EQ(pool.hash(1), std::nullopt);
  EXPECT_EQ(pool.Stats().num_evicted, 1);
  EXPECT_EQ(pool.Stats().num_cached, 0);
  EXPECT_TRUE(Check(pool, {u}).ok());
}

TEST(BlockPoolTest, AddRefRevivesAFreeCachedBlockFromTheMiddleOfTheList) {
  BlockPool pool(8, 4);
  std::vector<BlockId> t;
  ASSERT_TRUE(pool.Allocate(7, &t));
  ASSERT_TRUE(pool.RegisterHash(4, kH1));
  pool.ReleaseTable(t);  // 7 6 5 4 3 2 1
  pool.AddRef(4);
  EXPECT_THAT(pool.FreeListForTesting(), ElementsAre(7, 6, 5, 3, 2, 1));
  EXPECT_EQ(pool.ref_count(4), 1);
  EXPECT_EQ(pool.hash(4), kH1);  // still cached, now in use
  const BlockPoolStats s = pool.Stats();
  EXPECT_EQ(s.num_in_use, 1);
  EXPECT_EQ(s.num_free_cached, 0);
  EXPECT_EQ(s.num_cached, 1);
  EXPECT_TRUE(Check(pool, {{4}}).ok());
  pool.AddRef(4);  // a second holder
  EXPECT_TRUE(Check(pool, {{4}, {4}}).ok());
}

TEST(BlockPoolTest, OneBlockPerHash) {
  BlockPool pool(8, 4);
  std::vector<BlockId> t;
  ASSERT_TRUE(pool.Allocate(2, &t));
  EXPECT_TRUE(pool.RegisterHash(1, kH1));
  EXPECT_TRUE(pool.RegisterHash(1, kH1));   // idempotent
  EXPECT_FALSE(pool.RegisterHash(2, kH1));  // equal content is cached already
  EXPECT_EQ(pool.hash(2), std::nullopt);
  EXPECT_TRUE(pool.RegisterHash(2, kH2));
  EXPECT_EQ(pool.Stats().num_cached, 2);
  EXPECT_TRUE(Check(pool, {t}).ok());
}

TEST(BlockPoolTest, CheckInvariantsCatchesRefCountsThatDisagreeWithTables) {
  BlockPool pool(8, 4);
  std::vector<BlockId> t;
  ASSERT_TRUE(pool.Allocate(2, &t));
  EXPECT_THAT(std::string(Check(pool, {}).message()), HasSubstr("block 1 has ref_count 1 but 0"));
  EXPECT_THAT(std::string(Check(pool, {t, {2}}).message()),
              HasSubstr("block 2 has ref_count 1 but 2"));
  EXPECT_THAT(std::string(Check(pool, {{9}}).message()), HasSubstr("invalid id 9"));
  EXPECT_TRUE(Check(pool, {t}).ok());
}

TEST(BlockPoolDeathTest, ReleasingAFreeBlockIsABug) {
  BlockPool pool(8, 4);
  const std::vector<BlockId> t = {3};
  EXPECT_DEATH(pool.ReleaseTable(t), "KVSERVE_CHECK failed");
}

TEST(BlockPoolDeathTest, RevivingAnUncachedFreeBlockIsABug) {
  BlockPool pool(8, 4);
  EXPECT_DEATH(pool.AddRef(3), "KVSERVE_CHECK failed: b.cached");
}

}  // namespace
}  // namespace kvserve::scheduler
