// Scheduler: admission, expiry, Schedule() and the StepInput. The after-step
// half (sampling, stops, finishing) is in scheduler_update.cc.
#include "scheduler/scheduler.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace kvserve::scheduler {

std::string_view AbortCauseName(AbortCause cause) {
  switch (cause) {
    case AbortCause::kClient:
      return "client";
    case AbortCause::kShutdown:
      return "shutdown";
    case AbortCause::kDeadlineWaiting:
      return "deadline_waiting";
    case AbortCause::kDeadlineRunning:
      return "deadline_running";
    case AbortCause::kStepError:
      return "step_error";
  }
  return "unknown";
}

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager* kv,
                     const engine::Tokenizer* tokenizer)
    : config_(config), policy_(config.capacity), kv_(kv), tokenizer_(tokenizer) {
  KVSERVE_CHECK(kv_ != nullptr);
  KVSERVE_CHECK(config.capacity.block_size == kv_->block_size());
  KVSERVE_CHECK(config.capacity.num_usable_blocks <= kv_->num_blocks() - 1);
  KVSERVE_CHECK(config.batch.max_num_batched_tokens > 0 && config.batch.max_num_seqs > 0);
}

absl::Status Scheduler::AddRequest(RequestId id, RequestParams params, OutputCallback callback,
                                   TimePoint now, RejectReason* reason) {
  RejectReason why = RejectReason::kInvalidArgument;
  absl::Status status = policy_.CheckSubmission(params);
  if (status.ok() && requests_.contains(id)) {
    status = absl::AlreadyExistsError(absl::StrCat("request id ", id, " is already in use"));
  }
  if (status.ok()) {
    status = policy_.CheckQueueLimits(num_waiting(), waiting_.num_tokens(),
                                      static_cast<int32_t>(params.prompt_tokens.size()), &why);
  }
  if (status.ok() && params.constraint && grammar_service_ == nullptr) {
    status = absl::InvalidArgumentError(
        absl::StrCat(engine::grammar::ConstraintKindName(params.constraint->kind),
                     ": this engine compiles no grammars"));
  }
  if (!status.ok()) {
    CountRejection(why);
    if (reason != nullptr) *reason = why;
    return status;
  }
  if (params.deadline) ++num_with_deadline_;
  auto request = std::make_unique<Request>(id, std::move(params), std::move(callback), now,
                                           next_arrival_seq_++, config_.eos_token_ids, tokenizer_);
  if (config_.speculative.num_tokens > 0 && !request->params().constraint) {
    request->proposer.emplace(config_.speculative.ngram_min, config_.speculative.ngram_max);
  }
  if (request->params().constraint) {
    ++stats_.structured_requests;
    // Queued for compilation (or a cached grammar): never waits here.
    request->grammar.emplace();
    request->grammar->compiled = grammar_service_->Compile(*request->params().constraint);
    // (new) -> WAITING, outside the queue until the grammar is compiled
    awaiting_grammar_.push_back(request.get());
  } else {
    // (new) -> WAITING
    waiting_.Insert(request.get());
  }
  requests_.emplace(id, std::move(request));
  return absl::OkStatus();
}

const Request* Scheduler::Find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::ExpireDeadlines(TimePoint now) {
  if (num_with_deadline_ == 0) return;
  std::vector<Request*> expired;
  for (const auto& [id, r] : requests_) {
    if (r->params().deadline && *r->params().deadline <= now) expired.push_back(r.get());
  }
  // Deterministic order (the hash map's is not).
  std::sort(expired.begin(), expired.end(),
            [](const Request* a, const Request* b) { return a->arrival_seq() < b->arrival_seq(); });
  for (Request* r : expired) {
    const AbortCause cause = r->state() == RequestState::kRunning ? AbortCause::kDeadlineRunning
                                                                  : AbortCause::kDeadlineWaiting;
    ++stats_.aborted[static_cast<int>(cause)];
    RequestOutput out;
    out.text = r->stop_checker().Flush();
    out.status = absl::DeadlineExceededError("the request's deadline passed");
    // WAITING or RUNNING -> FINISHED(expired)
    FinishRequest(r, FinishReason::kExpired, std::move(out), now);
  }
}

void Scheduler::TakeCompiledGrammars(TimePoint now) {
  std::vector<Request*> still_waiting;
  std::vector<Request*> failed;
  for (Request* r : awaiting_grammar_) {
    const engine::grammar::CompiledConstraint& compiled = *r->grammar->compiled;
    if (!compiled.ready()) {
      still_waiting.push_back(r);
    } else if (!compiled.status().ok()) {
      failed.push_back(r);
    } else {
      r->grammar->matcher.emplace(compiled.grammar(), config_.capacity.vocab_size);
      waiting_.Insert(r);
    }
  }
  awaiting_grammar_ = std::move(still_waiting);
  for (Request* r : failed) {
    RequestOutput out;
    out.status = r->grammar->compiled->status();
    // WAITING -> FINISHED(rejected): its grammar does not compile
    FinishRequest(r, FinishReason::kRejected, std::move(out), now);
  }
}

void Scheduler::PrepareDeviceMasks(const SchedulerOutput& out) {
  for (const ScheduledRequest& s : out.scheduled) {
    Request* r = s.request;
    if (!s.samples || !r->grammar) continue;
    RequestGrammar& g = *r->grammar;
    const auto start = std::chrono::steady_clock::now();
    g.matcher->FillMask();
    g.device_mask.clear();
    g.matcher->AppendDisallowed(&g.device_mask);
    for (int32_t t : r->stop_checker().StopTokensToMask(r->num_output_tokens())) {
      g.device_mask.push_back(t);  // a repeated id is masked twice, harmlessly
    }
    ++stats_.last_step_constrained_rows;
    stats_.last_step_mask_s +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
}

void Scheduler::InsertRunning(Request* r) {
  auto pos =
      std::upper_bound(running_.begin(), running_.end(), r, [](const Request* a, const Request* b) {
        return CapacityPolicy::ServedBefore(a->priority(), a->arrival_seq(), b->priority(),
                                            b->arrival_seq());
      });
  running_.insert(pos, r);
}

void Scheduler::RemoveRunning(Request* r) {
  auto it = std::find(running_.begin(), running_.end(), r);
  KVSERVE_CHECK(it != running_.end());
  running_.erase(it);
}

void Scheduler::AddScheduled(Request* r, int32_t n, BatchPlanner& planner, SchedulerOutput& out,
                             std::vector<int32_t> draft) {
  planner.Take(n);
  r->last_scheduled_step = step_;
  const int32_t first = r->num_computed_tokens();
  const auto num_drafts = static_cast<int32_t>(draft.size());
  // max_tokens 0 (a prompt scored or echoed): caught up, it finishes unsampled.
  const bool samples = first + n - num_drafts == r->num_tokens() && r->params().stop.max_tokens > 0;
  out.scheduled.push_back(
      ScheduledRequest{.request = r,
                       .num_new_tokens = n,
                       .first_position = first,
                       .samples = samples,
                       .num_logits_rows = r->scoring_prompt() ? n : (samples ? 1 + num_drafts : 0),
                       .draft = std::move(draft)});
  out.num_tokens += n;
}

std::vector<int32_t> Scheduler::Draft(Request& r) const {
  // Every draft kept is an output token, and one more is sampled after them.
  const int32_t room = r.params().stop.max_tokens - r.num_output_tokens() - 1;
  const int32_t k = std::min(config_.speculative.num_tokens, room);
  if (k <= 0) return {};
  r.proposer->Extend(r.tokens());
  return r.proposer->Propose(r.tokens(), k);
}

Request* Scheduler::PreemptVictim(SchedulerOutput& out) {
  std::vector<VictimCandidate> candidates;
  std::vector<Request*> who;
  for (Request* r : running_) {
    if (r->state() != RequestState::kRunning || r->last_scheduled_step == step_) continue;
    candidates.push_back(VictimCandidate{.priority = r->priority(),
                                         .arrival_seq = r->arrival_seq(),
                                         .is_protected = r->protected_from_preemption()});
    who.push_back(r);
  }
  const std::optional<size_t> pick = CapacityPolicy::PickVictim(candidates);
  KVSERVE_CHECK(pick.has_value());  // the requester itself is always a candidate
  Request* victim = who[*pick];
  kv_->Free(victim->id());
  // RUNNING -> WAITING (preempted by recompute: K/V dropped, tokens kept). It
  // stays in running_ until Schedule() ends, marked by its state.
  victim->Preempt();
  waiting_.Insert(victim);
  ++out.num_preempted;
  ++stats_.num_preemptions;
  return victim;
}

void Scheduler::ScheduleRunning(Request* r, BatchPlanner& planner, SchedulerOutput& out,
                                bool speculate) {
  const int32_t bs = kv_->block_size();
  const int32_t to_compute = r->num_tokens() - r->num_computed_tokens();
  std::vector<int32_t> draft;
  if (speculate && to_compute == 1 && r->proposer) draft = Draft(*r);
  while (true) {
    const int32_t wanted = to_compute + static_cast<int32_t>(draft.size());
    const int32_t offered = planner.Offer(wanted);
    if (offered == 0) return;
    const int32_t held = static_cast<int32_t>(kv_->BlockTable(r->id()).size());
    const int32_t n = BatchPlanner::FitToBlocks(offered, r->num_computed_tokens(), held,
                                                kv_->num_free_blocks(), bs);
    if (n > 0) {
      // A short budget or pool cuts the drafts first (n >= 1 keeps the real token).
      if (n < wanted) draft.resize(static_cast<size_t>(std::max(0, n - to_compute)));
      KVSERVE_CHECK(kv_->Allocate(r->id(), r->num_computed_tokens(), n));
      AddScheduled(r, n, planner, out, std::move(draft));
      return;
    }
    // Not even one slot: preempt someone (perhaps r itself) and retry.
    if (PreemptVictim(out) == r) return;
  }
}

void Scheduler::AdmitWaiting(BatchPlanner& planner, SchedulerOutput& out, TimePoint now) {
  const int32_t bs = kv_->block_size();
  while (!waiting_.empty() && !planner.Exhausted() &&
         static_cast<int32_t>(running_.size()) < config_.batch.max_num_seqs) {
    Request* r = waiting_.front();
    // Lookup and allocation with no pool change in between (the prefix is
    // only valid until then).
    CachedPrefix prefix =
        kv_->GetComputedBlocks(r->tokens(), ExtraKeys{.cache_salt = r->params().cache_salt});
    if (r->scoring_prompt()) {
      // Cached positions have no logits to score: it computes them all (the
      // lookup's hashes stay, so its full blocks still enter the cache).
      prefix.blocks.clear();
      prefix.num_tokens = 0;
    }
    const int32_t offered = planner.Offer(r->num_tokens() - prefix.num_tokens);
    const int32_t n = BatchPlanner::FitToBlocks(offered, prefix.num_tokens,
                                                static_cast<int32_t>(prefix.blocks.size()),
                                                kv_->FreeBlocksAfterReferencing(prefix), bs);
    if (n == 0) return;  // the head waits for blocks; nobody overtakes it
    KVSERVE_CHECK(kv_->AllocateNew(r->id(), prefix, n));
    waiting_.Remove(r);
    // WAITING -> RUNNING (first admission, or resume after preemption)
    r->Admit(prefix.num_tokens, now);
    InsertRunning(r);
    AddScheduled(r, n, planner, out);
  }
}

SchedulerOutput Scheduler::Schedule(TimePoint now) {
  SchedulerOutput out;
  out.step = ++step_;
  stats_.last_step_constrained_rows = 0;
  stats_.last_step_mask_s = 0;
  ExpireDeadlines(now);
  if (!awaiting_grammar_.empty()) TakeCompiledGrammars(now);
  BatchPlanner planner(config_.batch);

  // Running requests, best first: decodes, then the rest. running_ is only
  // appended to by admission (after this loop); preempted requests stay in it,
  // marked WAITING, until the cleanup below.
  int32_t num_decoding = 0;
  for (const Request* r : running_) num_decoding += r->num_tokens() - r->num_computed_tokens() == 1;
  const bool speculate =
      config_.speculative.num_tokens > 0 && num_decoding <= config_.speculative.max_batch;
  for (const bool decode_pass : {true, false}) {
    for (size_t i = 0; i < running_.size() && !planner.Exhausted(); ++i) {
      Request* r = running_[i];
      if (r->state() != RequestState::kRunning || r->last_scheduled_step == step_) continue;
      const bool decoding = r->num_tokens() - r->num_computed_tokens() == 1;
      if (decoding != decode_pass) continue;
      ScheduleRunning(r, planner, out, speculate);
    }
  }
  std::erase_if(running_, [](const Request* r) { return r->state() != RequestState::kRunning; });

  // Admission would take blocks that a preemption just freed for running
  // requests; let them have this step.
  if (out.num_preempted == 0) AdmitWaiting(planner, out, now);
  return out;
}

engine::StepInput Scheduler::BuildStepInput(const SchedulerOutput& out,
                                            bool with_sample_specs) const {
  engine::StepInput in;
  in.token_ids.reserve(out.num_tokens);
  in.positions.reserve(out.num_tokens);
  in.slot_mapping.reserve(out.num_tokens);
  in.query_start.reserve(out.scheduled.size() + 1);
  in.block_table_start.reserve(out.scheduled.size() + 1);
  for (const ScheduledRequest& s : out.scheduled) {
    const Request* r = s.request;
    using Logits = engine::StepInput::Logits;
    const Logits logits = s.num_logits_rows == 0   ? Logits::kNone
                          : s.num_logits_rows == 1 ? Logits::kLast
                                                   : Logits::kAll;
    KVSERVE_CHECK(s.num_logits_rows <= 1 || s.num_logits_rows == s.num_new_tokens);
    std::span<const int32_t> tokens = r->tokens().subspan(s.first_position);
    std::vector<int32_t> with_draft;
    if (!s.draft.empty()) {  // the last token, then the drafts
      with_draft.assign(tokens.begin(), tokens.end());
      with_draft.insert(with_draft.end(), s.draft.begin(), s.draft.end());
      tokens = with_draft;
    }
    in.AddSequence(tokens.first(static_cast<size_t>(s.num_new_tokens)), s.first_position,
                   kv_->BlockTable(r->id()), kv_->block_size(), logits);
    if (with_sample_specs && s.samples) {
      in.sample_specs.push_back(engine::SampleSpec{
          .params = r->params().sampling,
          .prompt_tokens = r->prompt(),
          .output_tokens = r->output(),
          .masked_tokens = r->grammar
                               ? std::span<const int32_t>(r->grammar->device_mask)
                               : r->stop_checker().StopTokensToMask(r->num_output_tokens())});
    }
  }
  return in;
}

SchedulerStats Scheduler::Stats() const {
  SchedulerStats s = stats_;
  s.num_running = num_running();
  s.num_waiting = num_waiting();
  s.num_waiting_tokens = num_waiting_tokens();
  s.kv = kv_->Stats();
  return s;
}

}  // namespace kvserve::scheduler
