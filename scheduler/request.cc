#include "scheduler/request.h"

#include <algorithm>
#include <utility>

#include "common/check.h"

namespace kvserve::scheduler {
namespace {

double Seconds(TimePoint from, TimePoint to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

Request::Request(RequestId id, RequestParams params, OutputCallback callback, TimePoint arrival,
                 uint64_t arrival_seq, std::span<const int32_t> eos_token_ids,
                 const engine::Tokenizer* tokenizer)
    : id_(id),
      params_(std::move(params)),
      callback_(std::move(callback)),
      arrival_(arrival),
      arrival_seq_(arrival_seq),
      num_prompt_tokens_(static_cast<int32_t>(params_.prompt_tokens.size())),
      tokens_(params_.prompt_tokens),
      stop_checker_(params_.stop, eos_token_ids, tokenizer) {
  KVSERVE_CHECK(num_prompt_tokens_ > 0);
  tokens_.reserve(tokens_.size() + static_cast<size_t>(params_.stop.max_tokens));
}

void Request::Admit(int32_t num_cached_tokens, TimePoint now) {
  KVSERVE_CHECK(state_ == RequestState::kWaiting);
  KVSERVE_CHECK(num_cached_tokens >= 0 && num_cached_tokens < num_tokens());
  state_ = RequestState::kRunning;
  num_computed_tokens_ = num_cached_tokens;
  if (!first_admitted_) {
    first_admitted_ = now;
    cached_prompt_tokens_ = std::min(num_cached_tokens, num_prompt_tokens_);
  }
}

void Request::Preempt() {
  KVSERVE_CHECK(state_ == RequestState::kRunning);
  state_ = RequestState::kWaiting;
  num_computed_tokens_ = 0;
  ++num_preemptions_;
  num_tokens_at_preemption_ = num_tokens();
}

void Request::Finish(FinishReason reason, TimePoint now) {
  KVSERVE_CHECK(state_ != RequestState::kFinished);
  KVSERVE_CHECK(reason != FinishReason::kNone);
  state_ = RequestState::kFinished;
  finish_reason_ = reason;
  finished_ = now;
}

void Request::AdvanceComputed(int32_t n) {
  KVSERVE_CHECK(state_ == RequestState::kRunning);
  KVSERVE_CHECK(n > 0 && num_computed_tokens_ + n <= num_tokens());
  num_computed_tokens_ += n;
}

void Request::AppendOutput(int32_t token, TimePoint now) {
  KVSERVE_CHECK(state_ == RequestState::kRunning);
  KVSERVE_CHECK(num_computed_tokens_ == num_tokens());
  tokens_.push_back(token);
  token_times_.push_back(now);
}

void Request::AddPromptLogprob(TokenLogprobs scored) {
  KVSERVE_CHECK(scoring_prompt());
  KVSERVE_CHECK(scored.token == tokens_[static_cast<size_t>(next_scored_position_)]);
  prompt_logprobs_.push_back(std::move(scored));
  ++next_scored_position_;
}

Usage Request::MakeUsage() const {
  return Usage{.prompt_tokens = num_prompt_tokens_,
               .cached_prompt_tokens = cached_prompt_tokens_,
               .completion_tokens = num_output_tokens()};
}

Timings Request::MakeTimings() const {
  Timings t;
  if (first_admitted_) t.queue_s = Seconds(arrival_, *first_admitted_);
  if (!token_times_.empty()) t.time_to_first_token_s = Seconds(arrival_, token_times_.front());
  if (finished_) t.e2e_s = Seconds(arrival_, *finished_);
  t.token_times_s.reserve(token_times_.size());
  for (TimePoint tp : token_times_) t.token_times_s.push_back(Seconds(arrival_, tp));
  return t;
}

}  // namespace kvserve::scheduler
