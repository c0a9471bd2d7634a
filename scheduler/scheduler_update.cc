// Scheduler, the after-step half: advance, sample, stop checks, outputs,
// finishing and aborts.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "scheduler/scheduler.h"

namespace kvserve::scheduler {

void Scheduler::Update(const SchedulerOutput& out, const engine::StepOutput& step, TimePoint now) {
  // Every row is sampled before any request changes: sampling reads only
  // its own request's tokens and stop state, which the loop below changes
  // for that request alone, after its row was drawn.
  SampleRows(out, step);
  size_t row = 0;         // sampled row (sampled_ or step.samples)
  size_t logits_row = 0;  // first logits row of the next scheduled request
  ++stats_.num_steps;
  stats_.last_step_tokens = out.num_tokens;
  stats_.last_step_seqs = static_cast<int32_t>(out.scheduled.size());
  stats_.total_step_tokens += out.num_tokens;
  for (const ScheduledRequest& s : out.scheduled) {
    Request* r = s.request;
    // Nothing runs between Schedule and Update on this thread: still RUNNING.
    KVSERVE_CHECK(r->state() == RequestState::kRunning);
    KVSERVE_CHECK(r->num_computed_tokens() == s.first_position);
    const int32_t prompt_end = r->num_prompt_tokens();
    if (s.first_position < prompt_end) {
      stats_.total_prompt_tokens_computed +=
          std::min(prompt_end, s.first_position + s.num_new_tokens) - s.first_position;
    }
    if (r->scoring_prompt()) ScorePrompt(r, s, step, logits_row);
    logits_row += static_cast<size_t>(s.num_logits_rows);
    if (!s.draft.empty()) {
      EmitVerified(r, s, std::move(verified_[row++]), now);  // may finish (and destroy) r
      continue;
    }
    r->AdvanceComputed(s.num_new_tokens);
    kv_->CommitComputed(r->id(), r->tokens(), r->num_computed_tokens());
    if (!s.samples) {
      if (r->num_computed_tokens() == r->num_tokens()) FinishUnsampled(r, now);  // max_tokens 0
      continue;
    }
    if (!step.samples.empty()) {  // sampled on the device
      KVSERVE_CHECK(row < step.samples.size());
      Emit(r, step.samples[row++], now);  // may finish (and destroy) r
      continue;
    }
    Emit(r, std::move(sampled_[row++]), now);  // may finish (and destroy) r
  }
  if (!step.samples.empty()) {
    KVSERVE_CHECK(row == step.samples.size());
  } else {
    KVSERVE_CHECK(logits_row * static_cast<size_t>(step.vocab_size) == step.logits.size());
  }
}

void Scheduler::ScorePrompt(Request* r, const ScheduledRequest& s, const engine::StepOutput& step,
                            size_t first_row) {
  // Row j holds the logits after position first_position + j, which score
  // the prompt token that follows it; rows of positions scored before a
  // preemption are skipped.
  KVSERVE_CHECK(step.samples.empty() && s.num_logits_rows == s.num_new_tokens);
  const std::span<const int32_t> prompt = r->prompt();
  for (int32_t j = 0; j < s.num_new_tokens && r->scoring_prompt(); ++j) {
    const int32_t scored = s.first_position + j + 1;
    if (scored < r->next_scored_position()) continue;
    const engine::TokenScore score =
        engine::ScoreToken(step.row(first_row + static_cast<size_t>(j)),
                           prompt[static_cast<size_t>(scored)], r->params().num_prompt_logprobs);
    r->AddPromptLogprob(TokenLogprobs{.token = score.token,
                                      .logprob = score.logprob,
                                      .top = score.top_logprobs,
                                      .rank = score.rank});
  }
}

void Scheduler::FinishUnsampled(Request* r, TimePoint now) {
  RequestOutput out;
  out.prompt_logprobs = r->TakePromptLogprobs();
  // RUNNING -> FINISHED(length): max_tokens 0, the prompt computed
  FinishRequest(r, FinishReason::kLength, std::move(out), now);
}

void Scheduler::SampleRows(const SchedulerOutput& out, const engine::StepOutput& step) {
  sampled_.clear();
  if (!step.samples.empty()) return;  // sampled on the device
  std::vector<Request*> rows;
  std::vector<size_t> logits_rows;                  // rows[i]'s row of step.logits: its last one
  std::vector<const std::vector<int32_t>*> drafts;  // rows[i]'s speculative tokens
  size_t num_logits_rows = 0;
  for (const ScheduledRequest& s : out.scheduled) {
    num_logits_rows += static_cast<size_t>(s.num_logits_rows);
    if (!s.samples) continue;
    rows.push_back(s.request);
    logits_rows.push_back(num_logits_rows - 1);
    drafts.push_back(&s.draft);
  }
  KVSERVE_CHECK(num_logits_rows * static_cast<size_t>(step.vocab_size) == step.logits.size());
  sampled_.resize(rows.size());
  verified_.resize(rows.size());
  mask_seconds_.assign(rows.size(), 0.0);
  // The token r's sampler draws from `logits` after `output`: min_tokens'
  // stop tokens cannot be drawn before it; a grammar: only the tokens it
  // allows. Both mask before the sampler's penalties, temperature, top-k
  // and top-p.
  const auto draw = [&](Request& r, std::span<const float> logits, std::span<const int32_t> output,
                        std::vector<float>& masked, size_t i) {
    const std::span<const int32_t> mask =
        r.stop_checker().StopTokensToMask(static_cast<int32_t>(output.size()));
    if (!mask.empty() || r.grammar) {
      masked.assign(logits.begin(), logits.end());
      for (int32_t t : mask) {
        if (t >= 0 && static_cast<size_t>(t) < masked.size()) {
          masked[t] = -std::numeric_limits<float>::infinity();
        }
      }
      if (r.grammar) {
        const auto start = std::chrono::steady_clock::now();
        r.grammar->matcher->FillMask();
        r.grammar->matcher->ApplyMask(masked);
        mask_seconds_[i] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      logits = masked;
    }
    engine::SamplingParams params = r.params().sampling;
    params.logprobs = r.params().return_logprobs;  // else Emit drops them
    // The overload with a thread_local scratch: each pool thread its own.
    return engine::Sample(logits, params, r.prompt(), output);
  };
  const auto sample = [&](int64_t begin, int64_t end) {
    std::vector<float> masked;
    for (int64_t i = begin; i < end; ++i) {
      const auto row = static_cast<size_t>(i);
      Request& r = *rows[row];
      const std::vector<int32_t>& draft = *drafts[row];
      if (draft.empty()) {
        sampled_[row] = draw(r, step.row(logits_rows[row]), r.output(), masked, row);
        continue;
      }
      // Draft j is kept when the sampler, after the drafts kept before it,
      // draws it from row j; the first token it draws otherwise (or after
      // every draft, from the last row) is kept too and ends the chain.
      const size_t first_row = logits_rows[row] - draft.size();
      std::vector<int32_t> output(r.output().begin(), r.output().end());
      std::vector<engine::SampleResult>& kept = verified_[row];
      kept.clear();
      for (size_t j = 0; j <= draft.size(); ++j) {
        engine::SampleResult result = draw(r, step.row(first_row + j), output, masked, row);
        const bool accepted = j < draft.size() && result.token == draft[j];
        output.push_back(result.token);
        kept.push_back(std::move(result));
        if (!accepted) break;
      }
    }
  };
  const int64_t n = static_cast<int64_t>(rows.size());
  // A pool's fork and join costs microseconds; a row of Qwen2.5's 152k
  // vocabulary 0.07 ms greedy without logprobs, about 0.4 ms with them or a
  // temperature. Each chunk holds at least 64k logits, so a few rows of a
  // small vocabulary stay on this thread.
  constexpr int64_t kValuesPerChunk = 1 << 16;
  if (sampling_pool_ == nullptr) {
    sample(0, n);
  } else {
    sampling_pool_->ParallelFor(n, std::max<int64_t>(1, kValuesPerChunk / step.vocab_size), sample);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i]->grammar) continue;
    ++stats_.last_step_constrained_rows;
    stats_.last_step_mask_s += mask_seconds_[i];
  }
}

void Scheduler::Emit(Request* r, engine::SampleResult result, TimePoint now) {
  r->AppendOutput(result.token, now);
  ++stats_.total_output_tokens;

  RequestOutput out;
  out.request_id = r->id();
  if (r->num_output_tokens() == 1) out.prompt_logprobs = r->TakePromptLogprobs();
  out.token_ids.push_back(result.token);
  if (r->params().return_logprobs) {
    out.logprobs.push_back(TokenLogprobs{
        .token = result.token, .logprob = result.logprob, .top = std::move(result.top_logprobs)});
  }
  bool grammar_complete = false;
  if (r->grammar) {
    engine::grammar::TokenMatcher& matcher = *r->grammar->matcher;
    if (!matcher.Accept(result.token)) {
      // Only a row with every token masked gets here (the sampler then
      // returns token 0): a grammar that requires a stop token while
      // min_tokens still forbids it.
      out.text = r->stop_checker().Flush();
      out.status = absl::InvalidArgumentError(absl::StrCat(
          "the grammar allows no token at output position ", r->num_output_tokens() - 1,
          " (min_tokens forbids the stop token it requires)"));
      // RUNNING -> FINISHED(error)
      FinishRequest(r, FinishReason::kError, std::move(out), now);
      return;
    }
    grammar_complete = matcher.terminated();
  }
  StopChecker::Result stop = r->stop_checker().Append(result.token, r->num_output_tokens());
  if (stop.reason == FinishReason::kNone && grammar_complete) {
    // The grammar ended on a stop token the stop checks do not count
    // (ignore_eos): nothing may follow it.
    stop.text += r->stop_checker().Flush();
    stop.reason = FinishReason::kStopToken;
    stop.stop_token = result.token;
  }
  out.text = std::move(stop.text);
  if (stop.reason == FinishReason::kNone) {
    if (r->callback()) r->callback()(std::move(out));
    return;
  }
  out.stop_string = std::move(stop.stop_string);
  out.stop_token = stop.stop_token;
  // RUNNING -> FINISHED(stop token / stop string / length)
  FinishRequest(r, stop.reason, std::move(out), now);
}

void Scheduler::EmitVerified(Request* r, const ScheduledRequest& s,
                             std::vector<engine::SampleResult> verified, TimePoint now) {
  KVSERVE_CHECK(!verified.empty() && verified.size() <= s.draft.size() + 1);
  const auto num_accepted = static_cast<int32_t>(verified.size()) - 1;
  ++stats_.spec_drafts;
  stats_.spec_draft_tokens += static_cast<int64_t>(s.draft.size());
  stats_.spec_accepted_tokens += num_accepted;
  if (stats_.spec_accepted_per_position.size() < s.draft.size()) {
    stats_.spec_accepted_per_position.resize(s.draft.size());
  }
  for (int32_t j = 0; j < num_accepted; ++j) ++stats_.spec_accepted_per_position[j];
  const RequestId id = r->id();
  // Token j's K/V (its last token, then draft j - 1) is valid exactly when
  // every token before it was kept.
  for (engine::SampleResult& result : verified) {
    r->AdvanceComputed(1);
    kv_->CommitComputed(id, r->tokens(), r->num_computed_tokens());
    Emit(r, std::move(result), now);  // may finish (and destroy) r
    if (!requests_.contains(id)) return;
  }
  kv_->Trim(id, r->num_computed_tokens());  // the rejected drafts' slots
}

void Scheduler::FailStep(const SchedulerOutput& out, const absl::Status& status, TimePoint now) {
  for (const ScheduledRequest& s : out.scheduled) {
    Request* r = s.request;
    ++stats_.aborted[static_cast<int>(AbortCause::kStepError)];
    RequestOutput o;
    o.text = r->stop_checker().Flush();
    o.status = status;
    // RUNNING -> FINISHED(error)
    FinishRequest(r, FinishReason::kError, std::move(o), now);
  }
}

void Scheduler::Abort(RequestId id, TimePoint now, AbortCause cause) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;  // unknown or already finished: no-op
  Request* r = it->second.get();
  ++stats_.aborted[static_cast<int>(cause)];
  RequestOutput out;
  out.text = r->stop_checker().Flush();
  out.status = absl::CancelledError(cause == AbortCause::kShutdown ? "the engine is shutting down"
                                                                   : "aborted");
  // WAITING or RUNNING -> FINISHED(aborted)
  FinishRequest(r, FinishReason::kAborted, std::move(out), now);
}

void Scheduler::AbortAll(TimePoint now, AbortCause cause) {
  std::vector<Request*> all;
  for (const auto& [id, r] : requests_) all.push_back(r.get());
  std::sort(all.begin(), all.end(),
            [](const Request* a, const Request* b) { return a->arrival_seq() < b->arrival_seq(); });
  for (Request* r : all) Abort(r->id(), now, cause);
}

void Scheduler::FinishRequest(Request* r, FinishReason reason, RequestOutput out, TimePoint now) {
  kv_->Free(r->id());  // every block it held; a no-op if it held none (waiting)
  if (r->state() == RequestState::kWaiting && r->grammar && !r->grammar->matcher) {
    std::erase(awaiting_grammar_, r);  // no-op when TakeCompiledGrammars took it out
  } else if (r->state() == RequestState::kWaiting) {
    waiting_.Remove(r);
  } else {
    RemoveRunning(r);
  }
  if (r->params().deadline) --num_with_deadline_;
  // WAITING or RUNNING -> FINISHED(reason); the callers say which.
  r->Finish(reason, now);
  ++stats_.finished[static_cast<int>(reason)];
  out.request_id = r->id();
  out.finished = true;
  out.finish_reason = reason;
  out.usage = r->MakeUsage();
  out.timings = r->MakeTimings();
  if (r->callback()) r->callback()(std::move(out));
  requests_.erase(r->id());  // destroys r
}

}  // namespace kvserve::scheduler
