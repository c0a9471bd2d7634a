#include "scheduler/batch_planner.h"

#include <algorithm>

#include "common/check.h"

namespace kvserve::scheduler {

int32_t BatchPlanner::Offer(int32_t wanted) const {
  KVSERVE_CHECK(wanted >= 1);
  if (Exhausted()) return 0;
  int32_t n = std::min(wanted, tokens_left_);
  if (limits_.max_chunk_tokens > 0) n = std::min(n, limits_.max_chunk_tokens);
  return n;
}

void BatchPlanner::Take(int32_t n) {
  KVSERVE_CHECK(n > 0 && n <= tokens_left_ && seqs_left_ > 0);
  tokens_left_ -= n;
  --seqs_left_;
}

int32_t BatchPlanner::FitToBlocks(int32_t n, int32_t num_computed, int32_t num_held_blocks,
                                  int32_t num_free_blocks, int32_t block_size) {
  const int64_t reachable = (int64_t{num_held_blocks} + num_free_blocks) * block_size;
  const int64_t fit = reachable - num_computed;
  return static_cast<int32_t>(std::clamp<int64_t>(fit, 0, n));
}

}  // namespace kvserve::scheduler
