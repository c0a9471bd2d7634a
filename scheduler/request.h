// Request: one generation request's state inside the scheduler.
//
// State machine (docs/architecture.md "Request"); each transition is a method below and
// is commented where it is called:
//
//            Admit()                    Finish(stop/length/abort/expired/error)
//   WAITING ─────────► RUNNING ─────────────────────────────────► FINISHED
//      ▲                  │
//      └──── Preempt() ───┘   (recompute: K/V dropped, tokens kept)
//   WAITING ─── Finish(aborted/expired/rejected) ───────────────► FINISHED
//
// Token regions (num_tokens = prompt + output so far):
//
//   tokens:   [ prompt ................ | output ....... ]
//   computed: [ K/V in the cache ...........]              num_computed_tokens
//                                          [ to compute ]  (>= 1 while RUNNING)
//
// A RUNNING request always has num_computed_tokens < num_tokens: after a step
// in which it catches up it samples a token, which makes num_tokens grow. On
// preemption num_computed_tokens drops to 0 and the request recomputes prompt
// and output so far when it is admitted again (the prefix cache may serve a
// part); sampling is keyed by output position, so its output is unchanged.
//
// Ownership: the Scheduler owns every unfinished Request (unique_ptr in its
// table); queues hold raw pointers. Thread affinity: engine loop thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/grammar/constraint.h"
#include "engine/grammar/grammar_compiler.h"
#include "engine/grammar/token_matcher.h"
#include "engine/sampling/sampler.h"
#include "scheduler/kv_cache_manager.h"
#include "scheduler/ngram_proposer.h"
#include "scheduler/output_stream.h"
#include "scheduler/stop_checker.h"

namespace kvserve::scheduler {

enum class RequestState { kWaiting, kRunning, kFinished };

// What a client submits.
struct RequestParams {
  std::vector<int32_t> prompt_tokens = {};  // non-empty, ids inside the vocabulary
  engine::SamplingParams sampling = {};
  StopParams stop = {};
  bool return_logprobs = false;  // chosen token + sampling.num_logprobs top
  // Prompt logprobs (vLLM's prompt_logprobs; OpenAI's echo with logprobs):
  // -1 off; else every prompt token after the first is scored with this
  // many top entries (0..kMaxLogprobs), from the raw model distribution.
  // Such a request computes its whole prompt: it reads no prefix-cache
  // blocks until its prompt is scored (their positions' logits are never
  // computed again), though its own blocks enter the cache for others.
  int32_t num_prompt_logprobs = -1;
  // Lower value = more important: admitted first, preempted last (vLLM's
  // convention). FCFS within one priority.
  int32_t priority = 0;
  // Absolute. A request not finished by then finishes as kExpired, whether
  // it is still waiting or already running (partial output is kept).
  std::optional<TimePoint> deadline = std::nullopt;
  std::string cache_salt = {};  // requests share prefix-cache blocks only with equal salts
  // Structured output: the output text must match it. The request waits
  // (outside the waiting queue) until its grammar is compiled, then samples
  // only tokens the grammar allows and finishes as kStopToken when the
  // grammar is complete. Needs a tokenizer.
  std::optional<engine::grammar::Constraint> constraint = std::nullopt;
};

// A constrained request's grammar state (engine loop thread; its matcher
// also on the one sampling thread that draws the request's row in a step).
struct RequestGrammar {
  std::shared_ptr<const engine::grammar::CompiledConstraint> compiled;  // set on submission
  std::optional<engine::grammar::TokenMatcher> matcher;  // once compiled, before admission
  std::vector<int32_t> device_mask;  // a device sampler's masked ids for the next token
};

class Request {
 public:
  Request(RequestId id, RequestParams params, OutputCallback callback, TimePoint arrival,
          uint64_t arrival_seq, std::span<const int32_t> eos_token_ids,
          const engine::Tokenizer* tokenizer);
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  RequestId id() const { return id_; }
  RequestState state() const { return state_; }
  const RequestParams& params() const { return params_; }
  int32_t priority() const { return params_.priority; }
  uint64_t arrival_seq() const { return arrival_seq_; }
  TimePoint arrival_time() const { return arrival_; }

  std::span<const int32_t> tokens() const { return tokens_; }
  std::span<const int32_t> prompt() const { return std::span(tokens_).first(num_prompt_tokens_); }
  std::span<const int32_t> output() const { return std::span(tokens_).subspan(num_prompt_tokens_); }
  int32_t num_tokens() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t num_prompt_tokens() const { return num_prompt_tokens_; }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens_; }
  int32_t num_computed_tokens() const { return num_computed_tokens_; }
  int32_t num_preemptions() const { return num_preemptions_; }
  bool ever_admitted() const { return first_admitted_.has_value(); }

  // Thrash guard: true from a resume after preemption until the request has
  // sampled a new token (recomputing what it had is not progress).
  bool protected_from_preemption() const {
    return num_preemptions_ > 0 && num_tokens() <= num_tokens_at_preemption_;
  }

  // --- transitions (engine loop thread) ---
  // WAITING -> RUNNING with num_cached_tokens served by the prefix cache.
  void Admit(int32_t num_cached_tokens, TimePoint now);
  // RUNNING -> WAITING: K/V dropped (the caller frees the blocks).
  void Preempt();
  // ANY (not FINISHED) -> FINISHED.
  void Finish(FinishReason reason, TimePoint now);

  // RUNNING: K/V of n more tokens were computed by a step.
  void AdvanceComputed(int32_t n);
  // RUNNING, caught up: appends a sampled token.
  void AppendOutput(int32_t token, TimePoint now);

  StopChecker& stop_checker() { return stop_checker_; }
  const StopChecker& stop_checker() const { return stop_checker_; }
  const OutputCallback& callback() const { return callback_; }

  // The final message's usage and timings.
  Usage MakeUsage() const;
  Timings MakeTimings() const;

  // Prompt logprobs (params().num_prompt_logprobs >= 0): true until every
  // prompt token after the first is scored.
  bool scoring_prompt() const {
    return params_.num_prompt_logprobs >= 0 && next_scored_position_ < num_prompt_tokens_;
  }
  // The next prompt position to score (>= 1), and those scored so far,
  // which TakePromptLogprobs hands out once the prompt is complete.
  int32_t next_scored_position() const { return next_scored_position_; }
  void AddPromptLogprob(TokenLogprobs scored);
  std::vector<TokenLogprobs> TakePromptLogprobs() { return std::move(prompt_logprobs_); }

  // Scheduler bookkeeping: the step number in which it was last scheduled.
  int64_t last_scheduled_step = -1;
  // Set iff params().constraint is.
  std::optional<RequestGrammar> grammar;
  // Set when the request may speculate (SpeculativeConfig, unconstrained).
  std::optional<NgramProposer> proposer;

 private:
  const RequestId id_;
  const RequestParams params_;
  const OutputCallback callback_;
  const TimePoint arrival_;
  const uint64_t arrival_seq_;
  const int32_t num_prompt_tokens_;

  RequestState state_ = RequestState::kWaiting;
  FinishReason finish_reason_ = FinishReason::kNone;
  std::vector<int32_t> tokens_;  // prompt, then output
  int32_t num_computed_tokens_ = 0;
  int32_t num_preemptions_ = 0;
  int32_t num_tokens_at_preemption_ = 0;
  int32_t cached_prompt_tokens_ = 0;  // at first admission
  int32_t next_scored_position_ = 1;
  std::vector<TokenLogprobs> prompt_logprobs_;

  std::optional<TimePoint> first_admitted_;
  std::optional<TimePoint> finished_;
  std::vector<TimePoint> token_times_;

  StopChecker stop_checker_;
};

}  // namespace kvserve::scheduler
