#include "scheduler/capacity_policy.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvserve::scheduler {

std::string_view RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kInvalidArgument:
      return "invalid_argument";
    case RejectReason::kQueueFullRequests:
      return "queue_full_requests";
    case RejectReason::kQueueFullTokens:
      return "queue_full_tokens";
    case RejectReason::kShuttingDown:
      return "shutting_down";
  }
  return "unknown";
}

int32_t CapacityPolicy::MaxBlocksNeeded(const RequestParams& params) const {
  // K/V of every token but the last output (never fed back); with
  // max_tokens 0, of the whole prompt.
  const int64_t prompt_len = static_cast<int64_t>(params.prompt_tokens.size());
  const int64_t slots = std::max(prompt_len, prompt_len + params.stop.max_tokens - 1);
  return static_cast<int32_t>((slots + limits_.block_size - 1) / limits_.block_size);
}

absl::Status CapacityPolicy::CheckSubmission(const RequestParams& params) const {
  const int64_t prompt_len = static_cast<int64_t>(params.prompt_tokens.size());
  if (prompt_len == 0) return absl::InvalidArgumentError("prompt_tokens: empty prompt");
  for (size_t i = 0; i < params.prompt_tokens.size(); ++i) {
    const int32_t t = params.prompt_tokens[i];
    if (t < 0 || t >= limits_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt_tokens[", i, "]: id ", t,
                                                     " outside the vocabulary [0, ",
                                                     limits_.vocab_size, ")"));
    }
  }
  const StopParams& stop = params.stop;
  if (stop.max_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: must be at least 0, got ", stop.max_tokens));
  }
  if (params.num_prompt_logprobs < -1 || params.num_prompt_logprobs > engine::kMaxLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("prompt_logprobs: must be in [0, ",
                                                   engine::kMaxLogprobs, "], got ",
                                                   params.num_prompt_logprobs));
  }
  if (params.num_prompt_logprobs >= 0 && !limits_.supports_prompt_logprobs) {
    return absl::InvalidArgumentError(
        "prompt_logprobs: not computed by this backend's device sampler (serve on the cpu "
        "backend)");
  }
  if (stop.min_tokens < 0 || stop.min_tokens > stop.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_tokens: must be in [0, max_tokens=", stop.max_tokens, "], got ", stop.min_tokens));
  }
  for (int32_t t : stop.stop_token_ids) {
    if (t < 0 || t >= limits_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop_token_ids: id ", t, " outside the vocabulary"));
    }
  }
  for (const std::string& s : stop.stop_strings) {
    if (s.empty()) return absl::InvalidArgumentError("stop_strings: empty stop string");
  }
  if (params.constraint && !limits_.has_tokenizer) {
    return absl::InvalidArgumentError(
        absl::StrCat(engine::grammar::ConstraintKindName(params.constraint->kind),
                     ": structured outputs need the model's tokenizer, and it has none"));
  }
  if (!stop.stop_strings.empty() && !limits_.has_tokenizer) {
    return absl::InvalidArgumentError("stop_strings: the model has no tokenizer");
  }
  KVSERVE_RETURN_IF_ERROR(params.sampling.Validate());
  if (!params.sampling.logit_bias.empty()) {
    if (!limits_.supports_logit_bias) {
      return absl::InvalidArgumentError(
          "logit_bias: not applied by this backend's device sampler (serve on the cpu backend)");
    }
    // Validate() checked the order, so the last id is the largest.
    const int32_t last = params.sampling.logit_bias.back().token;
    if (last >= limits_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logit_bias: token id ", last, " outside the vocabulary [0, ", limits_.vocab_size, ")"));
    }
  }
  if (prompt_len + stop.max_tokens > limits_.max_model_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt_tokens + max_tokens: ", prompt_len, " + ", stop.max_tokens,
                     " exceeds the model length ", limits_.max_model_len));
  }
  if (MaxBlocksNeeded(params) > limits_.num_usable_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt_tokens + max_tokens: ", prompt_len, " + ", stop.max_tokens, " needs ",
        MaxBlocksNeeded(params), " KV blocks; the pool has ", limits_.num_usable_blocks));
  }
  if (prompt_len > limits_.max_waiting_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("prompt_tokens: ", prompt_len,
                                                   " tokens exceed the queue's token limit ",
                                                   limits_.max_waiting_tokens));
  }
  return absl::OkStatus();
}

absl::Status CapacityPolicy::CheckQueueLimits(int32_t num_waiting, int64_t num_waiting_tokens,
                                              int32_t num_tokens, RejectReason* reason) const {
  if (num_waiting + 1 > limits_.max_waiting_requests) {
    *reason = RejectReason::kQueueFullRequests;
    return absl::ResourceExhaustedError(absl::StrCat("waiting queue is full: ", num_waiting,
                                                     " requests (limit ",
                                                     limits_.max_waiting_requests, ")"));
  }
  if (num_waiting_tokens + num_tokens > limits_.max_waiting_tokens) {
    *reason = RejectReason::kQueueFullTokens;
    return absl::ResourceExhaustedError(
        absl::StrCat("waiting queue is full: ", num_waiting_tokens, " queued tokens + ", num_tokens,
                     " exceed the limit ", limits_.max_waiting_tokens));
  }
  return absl::OkStatus();
}

std::optional<size_t> CapacityPolicy::PickVictim(std::span<const VictimCandidate> candidates) {
  std::optional<size_t> best;
  // "Worse" victim key: higher priority value, then unprotected, then later arrival.
  auto better_victim = [](const VictimCandidate& a, const VictimCandidate& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.is_protected != b.is_protected) return !a.is_protected;
    return a.arrival_seq > b.arrival_seq;
  };
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!best || better_victim(candidates[i], candidates[*best])) best = i;
  }
  return best;
}

}  // namespace kvserve::scheduler
