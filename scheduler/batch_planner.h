// BatchPlanner: how many new tokens each request computes in one step.
//
// Phase-agnostic: a request wants num_tokens - num_computed_tokens tokens (1
// for one caught up, i.e. decoding; more for a prompt, a partial prefill or a
// resume). It gets
//
//   min(wanted, tokens left in the step budget, max_chunk_tokens if set)
//
// and, when KV blocks are short, no more than the slots it can get without
// preempting anyone (FitToBlocks): a prefill chunk shrinks before anyone is
// preempted. Each scheduled request also takes one of max_num_seqs seats.
//
// One BatchPlanner lives for one Schedule() call. Pure arithmetic; unit-tested
// with exact numbers (tests/unit/scheduler/batch_planner_test.cc).
#pragma once

#include <cstdint>

namespace kvserve::scheduler {

struct BatchLimits {
  int32_t max_num_batched_tokens = 2048;  // token budget per step
  int32_t max_num_seqs = 256;             // sequences per step (and running at once)
  // Cap on one request's tokens per step (long prefills are chunked to it so
  // that other prompts get a share); 0: only the budget caps.
  int32_t max_chunk_tokens = 0;
};

class BatchPlanner {
 public:
  explicit BatchPlanner(const BatchLimits& limits)
      : limits_(limits),
        tokens_left_(limits.max_num_batched_tokens),
        seqs_left_(limits.max_num_seqs) {}

  int32_t tokens_left() const { return tokens_left_; }
  int32_t seqs_left() const { return seqs_left_; }
  bool Exhausted() const { return tokens_left_ <= 0 || seqs_left_ <= 0; }

  // Tokens a request wanting `wanted` (>= 1) may compute now; 0 when the
  // budget or the seats are exhausted.
  int32_t Offer(int32_t wanted) const;

  // Consumes n (> 0) tokens and one seat.
  void Take(int32_t n);

  // The largest n' <= n whose slots fit without new preemption: a request
  // with num_computed tokens computed holding num_held_blocks blocks (which
  // cover at least num_computed slots) can reach
  // (num_held_blocks + num_free_blocks) * block_size slots.
  static int32_t FitToBlocks(int32_t n, int32_t num_computed, int32_t num_held_blocks,
                             int32_t num_free_blocks, int32_t block_size);

 private:
  BatchLimits limits_;
  int32_t tokens_left_;
  int32_t seqs_left_;
};

}  // namespace kvserve::scheduler
