// EngineCore: the synchronous serving core, one step at a time. Owns the
// KvCacheManager, the Scheduler and the StepRunner (the model). EngineLoop
// runs it on its own thread; tests and benchmarks drive it directly for
// exact control over when requests arrive.
//
// One Step(): Schedule -> BuildStepInput -> runner.Step -> Update (or
// FailStep when the runner returns an error: the step's requests finish as
// kError; the others are unaffected).
//
// Thread affinity: not thread-safe; one thread (the engine loop's) at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/grammar/grammar_compiler.h"
#include "engine/model.h"
#include "engine/model_runner.h"
#include "engine/step_input.h"
#include "engine/step_runner.h"
#include "scheduler/kv_cache_manager.h"
#include "scheduler/scheduler.h"

namespace kvserve::scheduler {

// The model, as the scheduler sees it: one forward step (engine/step_runner.h;
// tests run thousands of steps through cheap fakes of it).
using StepRunner = engine::StepRunner;

struct EngineConfig {
  BatchLimits batch;
  int32_t num_blocks = 256;  // the null block included
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  std::optional<HashKey> hash_key;  // random per process when unset
  bool enable_kv_events = false;    // record KV-cache events (TakeKvEvents)
  int32_t max_model_len = 0;        // 0: the model's max_position_embeddings
  int32_t max_waiting_requests = 1024;
  int64_t max_waiting_tokens = int64_t{1} << 22;
  // Off (num_tokens 0) for a runner that samples on its device: it returns
  // the sampled rows only, and verification needs every draft's logits.
  SpeculativeConfig speculative;
  // Called on the grammar compile thread after each compilation (metrics).
  engine::grammar::GrammarCompileService::CompileObserver on_grammar_compiled = nullptr;
};

// What the scheduler needs to know about the model.
struct ModelInfo {
  int32_t vocab_size = 0;
  int32_t max_model_len = 0;
  std::vector<int32_t> eos_token_ids;
  const engine::Tokenizer* tokenizer = nullptr;  // may be null: no text
};
ModelInfo ModelInfoOf(const engine::Model& model);

class EngineCore {
 public:
  EngineCore(const EngineConfig& config, const ModelInfo& model,
             std::unique_ptr<StepRunner> runner);
  // With a CPU engine::ModelRunner over `model` (which must outlive the core), its
  // KV storage sized by config.num_blocks / block_size, its rows in kv_dtype.
  static std::unique_ptr<EngineCore> ForModel(
      const engine::Model& model, const EngineConfig& config,
      engine::KvCacheDtype kv_dtype = engine::KvCacheDtype::kFloat32);

  absl::Status AddRequest(RequestId id, RequestParams params, OutputCallback callback,
                          TimePoint now = Clock::now(), RejectReason* reason = nullptr) {
    return scheduler_.AddRequest(id, std::move(params), std::move(callback), now, reason);
  }
  void Abort(RequestId id, TimePoint now = Clock::now(), AbortCause cause = AbortCause::kClient) {
    scheduler_.Abort(id, now, cause);
  }

  // One iteration. Returns false if nothing was scheduled (no model step ran).
  // `now` (default: the clock, read before and after the model step) is the
  // time deadlines are checked against and outputs are stamped with; tests
  // pass a fixed time to control expiry.
  bool Step(std::optional<TimePoint> now = std::nullopt);
  // Steps until every request has finished (tests); at most max_steps.
  int64_t RunUntilIdle(int64_t max_steps = 1'000'000);

  // The KV-cache events recorded since the last call, stamped with
  // timestamp_s (no events when enable_kv_events is off).
  KvEventBatch TakeKvEvents(double timestamp_s);
  // Drops every cached prefix block; false (nothing changes) while any
  // request holds blocks (KvCacheManager::ResetPrefixCache).
  [[nodiscard]] bool ResetPrefixCache() { return kv_.ResetPrefixCache(); }

  bool HasUnfinished() const { return scheduler_.HasUnfinished(); }
  SchedulerStats Stats() const { return scheduler_.Stats(); }
  const CapacityPolicy& policy() const { return scheduler_.policy(); }
  Scheduler& scheduler() { return scheduler_; }
  const KvCacheManager& kv() const { return kv_; }
  StepRunner& runner() { return *runner_; }
  // The status of the last failed step, OK if none failed.
  const absl::Status& last_step_error() const { return last_step_error_; }

 private:
  KvCacheManager kv_;
  std::unique_ptr<StepRunner> runner_;
  // Structured outputs; null without a tokenizer (constraints are rejected).
  std::unique_ptr<engine::grammar::GrammarCompileService> grammar_;
  Scheduler scheduler_;
  absl::Status last_step_error_;
};

}  // namespace kvserve::scheduler
