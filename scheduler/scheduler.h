// Scheduler: continuous batching over the KvCacheManager. Composes the
// CapacityPolicy (who enters, who is preempted), the BatchPlanner (how many
// tokens each gets) and the WaitingQueue into one step's SchedulerOutput,
// turns that into the engine's StepInput, and after the step samples,
// checks stop conditions and emits outputs.
//
// One step (Schedule):
//   0. expire: requests past their deadline finish as kExpired; constrained
//      requests whose grammar has compiled join the waiting queue (one whose
//      grammar failed finishes as kRejected with the compile error);
//   1. running requests, best first (priority, then arrival): first those
//      decoding (1 token), then those with more to compute (partial
//      prefills, resumes); a request short of blocks shrinks its chunk to
//      the free blocks, and with none preempts the worst unscheduled running
//      request (CapacityPolicy::PickVictim; possibly itself);
//   2. admission, only if nobody was preempted in this step: the waiting
//      queue in order, each with a prefix-cache lookup directly followed by
//      its allocation (no pool change in between), chunked to the budget and
//      the free blocks; the first that gets no token stops admission (FCFS).
// Then BuildStepInput, the model step, and Update (or FailStep).
//
// Ownership: owns every unfinished Request; uses (does not own) the
// KvCacheManager. Finished requests are destroyed right after their final
// output is delivered. Thread affinity: engine loop thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/sampling/sampler.h"
#include "engine/step_input.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/thread_pool.h"
#include "scheduler/batch_planner.h"
#include "scheduler/capacity_policy.h"
#include "scheduler/kv_cache_manager.h"
#include "scheduler/request.h"
#include "scheduler/stats.h"
#include "scheduler/waiting_queue.h"

namespace kvserve::scheduler {

// Speculative decoding by prompt lookup (ngram_proposer.h): a decoding
// request proposes up to num_tokens drafts from its own context, the step
// computes them after its last token, and Update keeps the longest prefix
// the request's own sampler agrees with, plus the token it sampled after
// it. Each kept token is the one the sampler draws without speculation
// (the same row, parameters and position), so outputs do not change: greedy
// and seeded requests give the same tokens, bit for bit on the CPU.
// Only host-sampling runners, unconstrained requests; off in a step where
// more than max_batch requests decode (large batches already use the
// weights they read).
struct SpeculativeConfig {
  int32_t num_tokens = 0;  // drafts per step; 0: off
  int32_t ngram_min = 2;
  int32_t ngram_max = 4;
  int32_t max_batch = 4;
};

struct SchedulerConfig {
  BatchLimits batch;
  CapacityLimits capacity;  // block_size / num_usable_blocks must match the KvCacheManager
  std::vector<int32_t> eos_token_ids;
  SpeculativeConfig speculative;
};

struct ScheduledRequest {
  Request* request = nullptr;
  int32_t num_new_tokens = 0;
  int32_t first_position = 0;  // num_computed_tokens when scheduled
  bool samples = false;        // caught up after this step: needs logits, samples
  // Logits rows the step returns for it, in position order from
  // first_position: all num_new_tokens while it scores its prompt
  // (Request::scoring_prompt), else 1 when it samples, else 0. When it
  // samples, its last row is the one sampled.
  int32_t num_logits_rows = 0;
  // Speculative tokens computed after the request's last token (their
  // logits rows follow its row); empty when it does not speculate.
  std::vector<int32_t> draft;
};

struct SchedulerOutput {
  int64_t step = 0;
  std::vector<ScheduledRequest> scheduled;
  int32_t num_tokens = 0;
  int32_t num_preempted = 0;
  bool empty() const { return scheduled.empty(); }
};

class Scheduler {
 public:
  // kv and tokenizer (nullable: no text) must outlive the scheduler.
  Scheduler(const SchedulerConfig& config, KvCacheManager* kv, const engine::Tokenizer* tokenizer);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const CapacityPolicy& policy() const { return policy_; }

  // Validates (CapacityPolicy: submission, then queue limits) and queues the
  // request as WAITING. On error nothing is kept and the callback is not
  // called; *reason (if given) says why. `id` must be new.
  absl::Status AddRequest(RequestId id, RequestParams params, OutputCallback callback,
                          TimePoint now, RejectReason* reason = nullptr);

  // Finishes `id` as kAborted wherever it is (waiting, mid-prefill, running),
  // freeing its blocks and delivering its final output. A no-op for an id
  // that is unknown or already finished.
  void Abort(RequestId id, TimePoint now, AbortCause cause = AbortCause::kClient);
  void AbortAll(TimePoint now, AbortCause cause);

  SchedulerOutput Schedule(TimePoint now);
  // with_sample_specs: for a runner that samples on its device, one
  // SampleSpec per sampling request (its spans point into request state,
  // valid until Update or FailStep).
  engine::StepInput BuildStepInput(const SchedulerOutput& out,
                                   bool with_sample_specs = false) const;
  // After a successful step: advances computed tokens, registers full blocks
  // in the prefix cache, samples, checks stops, emits outputs, finishes.
  void Update(const SchedulerOutput& out, const engine::StepOutput& step, TimePoint now);
  // Update samples the rows of a step on `pool` (nullptr: on the calling
  // thread). The pool must be one only this thread drives (the runner's):
  // Update runs between steps, never inside one. Each row's token is a pure
  // function of that row and its request, so the pool changes no result.
  void set_sampling_pool(kernels::ThreadPool* pool) { sampling_pool_ = pool; }
  // Compiles the grammars of constrained requests (nullptr: such requests
  // are rejected). Must outlive the scheduler.
  void set_grammar_service(engine::grammar::GrammarCompileService* service) {
    grammar_service_ = service;
  }
  // For a runner that samples on its device, before BuildStepInput: the
  // grammar mask of every constrained request that samples in this step, as
  // the list of ids it forbids (SampleSpec::masked_tokens).
  void PrepareDeviceMasks(const SchedulerOutput& out);
  // After a failed step: every scheduled request finishes as kError.
  void FailStep(const SchedulerOutput& out, const absl::Status& status, TimePoint now);

  bool HasUnfinished() const { return !requests_.empty(); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  // Waiting for admission, or for their grammar to compile.
  int32_t num_waiting() const {
    return waiting_.size() + static_cast<int32_t>(awaiting_grammar_.size());
  }
  int64_t num_waiting_tokens() const { return waiting_.num_tokens(); }
  const Request* Find(RequestId id) const;

  SchedulerStats Stats() const;
  void CountRejection(RejectReason reason) { ++stats_.rejected[static_cast<int>(reason)]; }

 private:
  void ExpireDeadlines(TimePoint now);
  // Constrained requests whose grammar is ready: into the waiting queue with
  // a matcher, or finished as kRejected when it failed to compile.
  void TakeCompiledGrammars(TimePoint now);
  // speculate: a decoding request may propose drafts in this step.
  void ScheduleRunning(Request* r, BatchPlanner& planner, SchedulerOutput& out, bool speculate);
  void AdmitWaiting(BatchPlanner& planner, SchedulerOutput& out, TimePoint now);
  void AddScheduled(Request* r, int32_t n, BatchPlanner& planner, SchedulerOutput& out,
                    std::vector<int32_t> draft = {});
  // The drafts a decoding request proposes now (speculative decoding).
  std::vector<int32_t> Draft(Request& r) const;
  // Preempts the worst running request not yet scheduled in this step.
  Request* PreemptVictim(SchedulerOutput& out);
  void InsertRunning(Request* r);
  void RemoveRunning(Request* r);

  // The host-sampled results of a step's logits rows, in row order, into
  // sampled_ (empty when the runner sampled on its device).
  void SampleRows(const SchedulerOutput& out, const engine::StepOutput& step);
  // Appends a sampled token, then advances its grammar, stop checks and outputs.
  void Emit(Request* r, engine::SampleResult result, TimePoint now);
  // A speculating request after its step: advances over and emits the kept
  // tokens (the accepted drafts, then the token sampled after them), until
  // one finishes it; then releases the slots of the rejected drafts.
  void EmitVerified(Request* r, const ScheduledRequest& s,
                    std::vector<engine::SampleResult> verified, TimePoint now);
  // Scores the prompt tokens that s's logits rows (from first_row) predict.
  void ScorePrompt(Request* r, const ScheduledRequest& s, const engine::StepOutput& step,
                   size_t first_row);
  // A request with max_tokens 0 whose prompt is computed finishes (kLength).
  void FinishUnsampled(Request* r, TimePoint now);
  // Any unfinished state -> FINISHED: frees blocks, dequeues, completes and
  // delivers `out` as the final message, destroys the request.
  void FinishRequest(Request* r, FinishReason reason, RequestOutput out, TimePoint now);

  const SchedulerConfig config_;
  const CapacityPolicy policy_;
  KvCacheManager* const kv_;
  const engine::Tokenizer* const tokenizer_;

  absl::flat_hash_map<RequestId, std::unique_ptr<Request>> requests_;  // unfinished
  WaitingQueue waiting_;
  std::vector<Request*> running_;  // RUNNING, best first (ServedBefore)
  uint64_t next_arrival_seq_ = 0;
  int64_t step_ = 0;
  int32_t num_with_deadline_ = 0;

  std::vector<Request*> awaiting_grammar_;  // WAITING, grammar not compiled yet; arrival order
  engine::grammar::GrammarCompileService* grammar_service_ = nullptr;  // not owned
  kernels::ThreadPool* sampling_pool_ = nullptr;                       // not owned
  std::vector<engine::SampleResult> sampled_;                          // SampleRows' output
  // SampleRows' output for a speculating row: the tokens it keeps, in order.
  std::vector<std::vector<engine::SampleResult>> verified_;
  std::vector<double> mask_seconds_;  // SampleRows: grammar mask time per row
  SchedulerStats stats_;
};

}  // namespace kvserve::scheduler
