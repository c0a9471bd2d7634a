#include "scheduler/engine_core.h"

#include <algorithm>
#include <utility>

#include "common/check.h"

namespace kvserve::scheduler {
namespace {

KvCacheConfig KvConfig(const EngineConfig& c) {
  return KvCacheConfig{.num_blocks = c.num_blocks,
                       .block_size = c.block_size,
                       .enable_prefix_caching = c.enable_prefix_caching,
                       .hash_key = c.hash_key,
                       .enable_kv_events = c.enable_kv_events};
}

SchedulerConfig MakeSchedulerConfig(const EngineConfig& c, const ModelInfo& m,
                                    const StepRunner* runner) {
  KVSERVE_CHECK(runner != nullptr);
  SchedulerConfig s;
  s.batch = c.batch;
  s.capacity = CapacityLimits{.max_model_len = c.max_model_len > 0
                                                   ? std::min(c.max_model_len, m.max_model_len)
                                                   : m.max_model_len,
                              .num_usable_blocks = c.num_blocks - 1,
                              .block_size = c.block_size,
                              .vocab_size = m.vocab_size,
                              .has_tokenizer = m.tokenizer != nullptr,
                              .supports_logit_bias = !runner->SamplesOnDevice(),
                              .supports_prompt_logprobs = !runner->SamplesOnDevice(),
                              .max_waiting_requests = c.max_waiting_requests,
                              .max_waiting_tokens = c.max_waiting_tokens};
  s.eos_token_ids = m.eos_token_ids;
  s.speculative = c.speculative;
  if (runner->SamplesOnDevice()) s.speculative.num_tokens = 0;
  return s;
}

}  // namespace

ModelInfo ModelInfoOf(const engine::Model& model) {
  ModelInfo info;
  info.vocab_size = static_cast<int32_t>(model.config.vocab_size);
  info.max_model_len = static_cast<int32_t>(model.config.max_position_embeddings);
  info.eos_token_ids = model.config.eos_token_ids;
  info.tokenizer = model.tokenizer.get();
  if (info.tokenizer != nullptr) {
    if (std::optional<int32_t> eos = info.tokenizer->eos_token_id();
        eos && std::find(info.eos_token_ids.begin(), info.eos_token_ids.end(), *eos) ==
                   info.eos_token_ids.end()) {
      info.eos_token_ids.push_back(*eos);
    }
  }
  return info;
}

EngineCore::EngineCore(const EngineConfig& config, const ModelInfo& model,
                       std::unique_ptr<StepRunner> runner)
    : kv_(KvConfig(config)),
      runner_(std::move(runner)),
      scheduler_(MakeSchedulerConfig(config, model, runner_.get()), &kv_, model.tokenizer) {
  scheduler_.set_sampling_pool(runner_->HostPool());
  if (model.tokenizer != nullptr) {
    // Its vocabulary is built on its own thread at the first constraint.
    grammar_ = std::make_unique<engine::grammar::GrammarCompileService>(
        engine::grammar::GrammarVocab{.tokenizer = model.tokenizer,
                                      .vocab_size = model.vocab_size,
                                      .stop_token_ids = model.eos_token_ids},
        config.on_grammar_compiled);
    scheduler_.set_grammar_service(grammar_.get());
  }
}

std::unique_ptr<EngineCore> EngineCore::ForModel(const engine::Model& model,
                                                 const EngineConfig& config,
                                                 engine::KvCacheDtype kv_dtype) {
  auto runner = std::make_unique<engine::ModelRunner>(
      model, engine::RunnerOptions{.num_blocks = config.num_blocks,
                                   .block_size = config.block_size,
                                   .kv_cache_dtype = kv_dtype});
  return std::make_unique<EngineCore>(config, ModelInfoOf(model), std::move(runner));
}

bool EngineCore::Step(std::optional<TimePoint> now) {
  const SchedulerOutput out = scheduler_.Schedule(now.value_or(Clock::now()));
  if (out.empty()) return false;
  if (runner_->SamplesOnDevice()) scheduler_.PrepareDeviceMasks(out);
  const engine::StepInput input = scheduler_.BuildStepInput(out, runner_->SamplesOnDevice());
  absl::StatusOr<engine::StepOutput> result = runner_->Step(input);
  if (!result.ok()) {
    last_step_error_ = result.status();
    scheduler_.FailStep(out, result.status(), now.value_or(Clock::now()));
    return true;
  }
  scheduler_.Update(out, *result, now.value_or(Clock::now()));
  return true;
}

KvEventBatch EngineCore::TakeKvEvents(double timestamp_s) {
  KvEventRecorder* events = kv_.events();
  if (events == nullptr) return KvEventBatch{.timestamp_s = timestamp_s};
  return events->TakeBatch(timestamp_s);
}

int64_t EngineCore::RunUntilIdle(int64_t max_steps) {
  int64_t steps = 0;
  while (HasUnfinished() && steps < max_steps) {
    Step();
    ++steps;
  }
  return steps;
}

}  // namespace kvserve::scheduler
