// CapacityPolicy: who may enter, who must leave.
//
// - Submission: a request that can never run (its prompt plus max_tokens
//   exceeds the model length or the whole KV pool, or its parameters are
//   invalid) is InvalidArgument at Submit, naming the field, instead of
//   starving in the queue.
// - Queue limits: the waiting queue (never-admitted and preempted requests)
//   is bounded in requests and in tokens (prompt + output so far of each
//   waiting request); a submission beyond either is ResourceExhausted.
//   Preempted requests re-enter the queue even beyond the limits (they were
//   accepted already); the limits apply to new submissions only.
// - Order: lower priority value first, then earlier arrival (FCFS).
// - Preemption victim: the worst by that order among the candidates (lowest
//   priority class, then latest arrival), except that inside one priority
//   class a request protected by the thrash guard (resumed after preemption,
//   no new token yet) is chosen only if every candidate of that class is
//   protected. Priority always wins over the guard.
//
// Stateless apart from its limits; pure functions, unit-tested with exact
// decisions (tests/unit/scheduler/capacity_policy_test.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "absl/status/status.h"
#include "scheduler/request.h"

namespace kvserve::scheduler {

struct CapacityLimits {
  int32_t max_model_len = 0;      // prompt + max_tokens must fit
  int32_t num_usable_blocks = 0;  // the pool's blocks minus the null block
  int32_t block_size = 16;
  int32_t vocab_size = 0;
  bool has_tokenizer = false;  // stop strings need one
  // false when the runner samples on its device, whose sampler (the cuda
  // backend's) does not apply logit_bias: such requests are refused by name.
  bool supports_logit_bias = true;
  // False for a runner that samples on its device: it returns no logits
  // rows but the sampled ones, so prompt tokens cannot be scored.
  bool supports_prompt_logprobs = true;
  int32_t max_waiting_requests = 1024;
  int64_t max_waiting_tokens = int64_t{1} << 22;
};

enum class RejectReason : int {
  kInvalidArgument = 0,
  kQueueFullRequests,
  kQueueFullTokens,
  kShuttingDown,
};
inline constexpr int kNumRejectReasons = 4;
std::string_view RejectReasonName(RejectReason reason);

// What victim choice needs to know about one running request.
struct VictimCandidate {
  int32_t priority = 0;
  uint64_t arrival_seq = 0;
  bool is_protected = false;  // thrash guard
};

class CapacityPolicy {
 public:
  explicit CapacityPolicy(const CapacityLimits& limits) : limits_(limits) {}

  const CapacityLimits& limits() const { return limits_; }

  // OK, or InvalidArgument naming the field and why the request can never
  // run. Static checks only; needs no scheduler state.
  absl::Status CheckSubmission(const RequestParams& params) const;

  // OK, or ResourceExhausted (and *reason) if a request of num_tokens joined
  // a waiting queue of num_waiting requests holding num_waiting_tokens.
  absl::Status CheckQueueLimits(int32_t num_waiting, int64_t num_waiting_tokens, int32_t num_tokens,
                                RejectReason* reason) const;

  // Blocks a request needs at most: K/V slots for prompt + max_tokens - 1
  // tokens (the last sampled token is never computed).
  int32_t MaxBlocksNeeded(const RequestParams& params) const;

  // True if (pa, sa) is served before (pb, sb): lower priority value, then
  // earlier arrival.
  static bool ServedBefore(int32_t pa, uint64_t sa, int32_t pb, uint64_t sb) {
    return pa != pb ? pa < pb : sa < sb;
  }

  // Index of the victim among candidates (see the header comment); nullopt
  // for an empty span.
  static std::optional<size_t> PickVictim(std::span<const VictimCandidate> candidates);

 private:
  CapacityLimits limits_;
};

}  // namespace kvserve::scheduler
