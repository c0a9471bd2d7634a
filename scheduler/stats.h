// SchedulerStats: a plain-value snapshot for metrics and tests. The engine
// loop copies one out after every step (under a mutex); readers get a copy.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "scheduler/capacity_policy.h"
#include "scheduler/kv_cache_manager.h"
#include "scheduler/output_stream.h"

namespace kvserve::scheduler {

// Why a request was aborted (FinishReason kAborted / kExpired / kError).
enum class AbortCause : int {
  kClient = 0,       // Abort(id)
  kShutdown,         // EngineLoop::Stop with the request outstanding
  kDeadlineWaiting,  // expired before its first admission or while preempted
  kDeadlineRunning,  // expired while running
  kStepError,        // the model step it was in failed
};
inline constexpr int kNumAbortCauses = 5;
std::string_view AbortCauseName(AbortCause cause);

struct SchedulerStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;  // never admitted + preempted
  int64_t num_waiting_tokens = 0;
  KvCacheStats kv;  // block pool counts, prefix-cache queries / queried / hit tokens

  int64_t num_preemptions = 0;
  std::array<int64_t, kNumRejectReasons> rejected{};  // by RejectReason
  std::array<int64_t, kNumFinishReasons> finished{};  // by FinishReason
  std::array<int64_t, kNumAbortCauses> aborted{};     // by AbortCause

  int64_t num_steps = 0;         // model steps run
  int32_t last_step_tokens = 0;  // tokens computed in the last step
  int32_t last_step_seqs = 0;
  int64_t total_step_tokens = 0;             // tokens computed in all steps
  int64_t total_prompt_tokens_computed = 0;  // of which at prompt positions (recompute included)
  int64_t total_output_tokens = 0;           // tokens sampled

  // Structured outputs.
  int64_t structured_requests = 0;         // accepted requests with a constraint
  int32_t last_step_constrained_rows = 0;  // rows of the last step drawn under a grammar
  double last_step_mask_s = 0;             // filling and applying their masks, summed over the rows

  // Speculative decoding (vLLM's spec_decode counters).
  int64_t spec_drafts = 0;                          // verification chains (one per speculating row)
  int64_t spec_draft_tokens = 0;                    // tokens proposed
  int64_t spec_accepted_tokens = 0;                 // of which kept
  std::vector<int64_t> spec_accepted_per_position;  // [j]: chains that kept draft j
};

}  // namespace kvserve::scheduler
