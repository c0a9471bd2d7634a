// BatchPlanner: exact token numbers.
#include "scheduler/batch_planner.h"

#include "gtest/gtest.h"

namespace kvserve::scheduler {
namespace {

TEST(BatchPlannerTest, BudgetSeatsAndChunks) {
  BatchPlanner planner({.max_num_batched_tokens = 10, .max_num_seqs = 3});
  EXPECT_EQ(planner.Offer(1), 1);
  planner.Take(1);
  EXPECT_EQ(planner.Offer(20), 9);  // a long prompt gets the rest of the budget
  planner.Take(6);
  EXPECT_EQ(planner.tokens_left(), 3);
  EXPECT_EQ(planner.Offer(2), 2);
  planner.Take(2);
  EXPECT_TRUE(planner.Exhausted());  // 3 seats used
  EXPECT_EQ(planner.Offer(1), 0);

  BatchPlanner chunked({.max_num_batched_tokens = 100, .max_num_seqs = 8, .max_chunk_tokens = 16});
  EXPECT_EQ(chunked.Offer(50), 16);
  EXPECT_EQ(chunked.Offer(5), 5);
}

TEST(BatchPlannerTest, FitToBlocks) {
  // block_size 4: 5 computed tokens in 2 held blocks (8 slots), 1 free block: 12 slots.
  EXPECT_EQ(BatchPlanner::FitToBlocks(10, 5, 2, 1, 4), 7);
  EXPECT_EQ(BatchPlanner::FitToBlocks(3, 5, 2, 1, 4), 3);
  EXPECT_EQ(BatchPlanner::FitToBlocks(1, 8, 2, 0, 4), 0);  // full and no free block
  EXPECT_EQ(BatchPlanner::FitToBlocks(1, 7, 2, 0, 4), 1);  // one slot left in its block
  EXPECT_EQ(BatchPlanner::FitToBlocks(9, 0, 0, 2, 4), 8);  // admission, nothing held
}

}  // namespace
}  // namespace kvserve::scheduler
