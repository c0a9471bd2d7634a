#include "server/metrics.h"

#include <chrono>
#include <string>
#include <utility>

namespace kvserve::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// Seconds. Fine at the low end: a CPU decode step of a small model and a GPU
// step are a few milliseconds.
const Histogram::BucketBoundaries kLatencyBuckets = {
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03,
    0.04,   0.05,  0.075, 0.1,   0.15,  0.2,    0.3,  0.4,   0.5,  0.75,  1.0,
    2.5,    5.0,   7.5,   10.0,  20.0,  40.0,   80.0, 160.0, 320.0};
// Seconds, for the grammar masks of one step: tens of microseconds per
// request when a grammar allows few tokens, milliseconds when it allows most.
const Histogram::BucketBoundaries kMaskBuckets = {0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005,
                                                  0.001,   0.002,   0.005,   0.01,   0.02,   0.05,
                                                  0.1,     0.2,     0.5,     1.0};
const Histogram::BucketBoundaries kTokenCountBuckets = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};

// Finish reasons as the metric's label (the proto's names, lower case).
const char* FinishLabel(scheduler::FinishReason reason) {
  using scheduler::FinishReason;
  switch (reason) {
    case FinishReason::kStopToken:
    case FinishReason::kStopString:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAborted:
    case FinishReason::kRejected:
      return "aborted";
    case FinishReason::kExpired:
      return "deadline";
    case FinishReason::kError:
      return "error";
    case FinishReason::kNone:
      break;
  }
  return "";
}

const char* RejectionLabel(Rejection why) {
  switch (why) {
    case Rejection::kInvalidArgument:
      return "invalid_argument";
    case Rejection::kQueueFull:
      return "queue_full";
    case Rejection::kUnavailable:
      return "unavailable";
    case Rejection::kUnauthenticated:
      return "unauthenticated";
  }
  return "";
}

}  // namespace

ServerMetrics::ServerMetrics(const ServerInfoLabels& info, const scheduler::EngineLoop& loop)
    : loop_(&loop), registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  BuildGauge()
      .Name("kvserve_server_info")
      .Help("Static facts about this server; the value is always 1.")
      .Register(r)
      .Add({{"model", info.model},
            {"backend", info.backend},
            {"block_size", std::to_string(info.block_size)},
            {"kv_cache_dtype", info.kv_cache_dtype},
            {"eos_token_ids", info.eos_token_ids},
            {"version", info.version}})
      .Set(1);
  // The KV pool's shape under the label names vLLM's cache_config_info uses,
  // which the Gateway API Inference Extension's endpoint picker reads
  // (--cache-info-metric; deploy/k8s/overlays/inference-gateway/).
  BuildGauge()
      .Name("kvserve_cache_config_info")
      .Help("The KV cache pool's block size and block count as labels; the value is always 1.")
      .Register(r)
      .Add({{"block_size", std::to_string(info.block_size)},
            {"num_gpu_blocks", std::to_string(info.num_usable_kv_blocks)},
            {"cache_dtype", info.kv_cache_dtype}})
      .Set(1);

  running_ = &BuildGauge()
                  .Name("kvserve_num_requests_running")
                  .Help("Requests in the running batch.")
                  .Register(r)
                  .Add({});
  waiting_ = &BuildGauge()
                  .Name("kvserve_num_requests_waiting")
                  .Help("Requests waiting to be scheduled (new or preempted).")
                  .Register(r)
                  .Add({});
  auto& blocks = BuildGauge()
                     .Name("kvserve_kv_cache_blocks")
                     .Help("KV cache blocks by state; the states sum to the capacity.")
                     .Register(r);
  blocks_in_use_ = &blocks.Add({{"state", "in_use"}});
  blocks_free_cached_ = &blocks.Add({{"state", "free_cached"}});
  blocks_free_uncached_ = &blocks.Add({{"state", "free_uncached"}});
  BuildGauge()
      .Name("kvserve_kv_cache_capacity_tokens")
      .Help(
          "Tokens the KV cache pool holds (usable blocks x block size), in its format "
          "(kvserve_server_info's kv_cache_dtype).")
      .Register(r)
      .Add({})
      .Set(static_cast<double>(info.kv_cache_capacity_tokens));
  blocks_capacity_ = &BuildGauge()
                          .Name("kvserve_kv_cache_blocks_capacity")
                          .Help("Usable KV cache blocks (the null block excluded).")
                          .Register(r)
                          .Add({});
  usage_ratio_ = &BuildGauge()
                      .Name("kvserve_kv_cache_usage_ratio")
                      .Help("Fraction of usable KV cache blocks in use (0 to 1).")
                      .Register(r)
                      .Add({});
  accounting_consistent_ =
      &BuildGauge()
           .Name("kvserve_kv_cache_accounting_consistent")
           .Help("1 when in-use + free-cached + free-uncached blocks equal the capacity, else 0.")
           .Register(r)
           .Add({});

  blocks_cached_ =
      &BuildGauge()
           .Name("kvserve_kv_cache_cached_blocks")
           .Help(
               "KV cache blocks findable by prefix lookup (holding a content hash, free or in "
               "use): the set KV-cache events describe.")
           .Register(r)
           .Add({});
  kv_events_published_ = &BuildCounter()
                              .Name("kvserve_kv_events_published_batches_total")
                              .Help("KV-cache event batches sent on the ZeroMQ PUB socket.")
                              .Register(r)
                              .Add({});
  kv_events_dropped_ =
      &BuildCounter()
           .Name("kvserve_kv_events_dropped_batches_total")
           .Help(
               "KV-cache event batches dropped because the publisher's queue was full (their "
               "sequence numbers are never sent).")
           .Register(r)
           .Add({});

  engine_busy_ = &BuildGauge()
                      .Name("kvserve_engine_busy")
                      .Help("1 while the engine loop has unfinished requests, else 0.")
                      .Register(r)
                      .Add({});
  last_step_timestamp_ =
      &BuildGauge()
           .Name("kvserve_engine_last_step_timestamp_seconds")
           .Help(
               "Unix time when the engine loop last completed a step (its heartbeat); 0 before "
               "the first. Busy with an old heartbeat means stalled.")
           .Register(r)
           .Add({});

  http_requests_ = &BuildCounter()
                        .Name("kvserve_http_requests_total")
                        .Help(
                            "HTTP API responses by status code (as they start; an SSE stream "
                            "counts once, as 200).")
                        .Register(r);
  auto& accepted = BuildCounter()
                       .Name("kvserve_api_requests_total")
                       .Help(
                           "Requests accepted into the engine queue, by API (grpc, http; an "
                           "HTTP request with n choices counts n).")
                       .Register(r);
  accepted_[static_cast<int>(Api::kGrpc)] = &accepted.Add({{"api", "grpc"}});
  accepted_[static_cast<int>(Api::kHttp)] = &accepted.Add({{"api", "http"}});
  http_connections_ = &BuildGauge()
                           .Name("kvserve_http_connections")
                           .Help("Open HTTP API connections.")
                           .Register(r)
                           .Add({});

  preemptions_ = &BuildCounter()
                      .Name("kvserve_num_preemptions_total")
                      .Help("Requests preempted (their KV blocks dropped, to be recomputed).")
                      .Register(r)
                      .Add({});
  prefix_queries_ = &BuildCounter()
                         .Name("kvserve_prefix_cache_queries_total")
                         .Help("Prompt tokens looked up in the prefix cache.")
                         .Register(r)
                         .Add({});
  prefix_hits_ = &BuildCounter()
                      .Name("kvserve_prefix_cache_hits_total")
                      .Help("Prompt tokens served from the prefix cache.")
                      .Register(r)
                      .Add({});
  prompt_tokens_ = &BuildCounter()
                        .Name("kvserve_prompt_tokens_total")
                        .Help("Prompt tokens of accepted requests, counted when each finishes.")
                        .Register(r)
                        .Add({});
  generation_tokens_ = &BuildCounter()
                            .Name("kvserve_generation_tokens_total")
                            .Help("Output tokens generated.")
                            .Register(r)
                            .Add({});
  auto& finished = BuildCounter()
                       .Name("kvserve_requests_finished_total")
                       .Help("Accepted requests that finished, by finish reason.")
                       .Register(r);
  for (int i = 1; i < scheduler::kNumFinishReasons; ++i) {
    finished_[i] =
        &finished.Add({{"finished_reason", FinishLabel(static_cast<scheduler::FinishReason>(i))}});
  }
  auto& rejected = BuildCounter()
                       .Name("kvserve_requests_rejected_total")
                       .Help("Requests refused before reaching the engine queue, by reason.")
                       .Register(r);
  for (int i = 0; i < kNumRejections; ++i) {
    rejected_[i] = &rejected.Add({{"reason", RejectionLabel(static_cast<Rejection>(i))}});
  }

  auto histogram = [&](const char* name, const char* help,
                       const Histogram::BucketBoundaries& buckets) {
    return &BuildHistogram().Name(name).Help(help).Register(r).Add({}, buckets);
  };
  ttft_ = histogram("kvserve_time_to_first_token_seconds",
                    "Arrival to first output token, per request.", kLatencyBuckets);
  itl_ = histogram("kvserve_inter_token_latency_seconds",
                   "Time between consecutive output tokens of a request.", kLatencyBuckets);
  e2e_ = histogram("kvserve_e2e_request_latency_seconds", "Arrival to finish, per request.",
                   kLatencyBuckets);
  queue_time_ = histogram("kvserve_request_queue_time_seconds",
                          "Arrival to first scheduled, per request.", kLatencyBuckets);
  prompt_len_ = histogram("kvserve_request_prompt_tokens", "Prompt tokens per finished request.",
                          kTokenCountBuckets);
  generation_len_ = histogram("kvserve_request_generation_tokens",
                              "Output tokens per finished request.", kTokenCountBuckets);
  step_tokens_ =
      histogram("kvserve_iteration_tokens", "Tokens computed per engine step.", kTokenCountBuckets);
  step_duration_ =
      histogram("kvserve_step_duration_seconds",
                "Duration of one engine step (schedule, model, sample, update).", kLatencyBuckets);

  // Speculative decoding, vLLM's spec_decode counters under kvserve's prefix.
  spec_drafts_ =
      &BuildCounter()
           .Name("kvserve_spec_decode_num_drafts_total")
           .Help("Speculative verification chains (one per speculating request and step).")
           .Register(r)
           .Add({});
  spec_draft_tokens_ = &BuildCounter()
                            .Name("kvserve_spec_decode_num_draft_tokens_total")
                            .Help("Draft tokens proposed.")
                            .Register(r)
                            .Add({});
  spec_accepted_tokens_ = &BuildCounter()
                               .Name("kvserve_spec_decode_num_accepted_tokens_total")
                               .Help("Draft tokens accepted (kept as output).")
                               .Register(r)
                               .Add({});
  spec_accepted_per_pos_ = &BuildCounter()
                                .Name("kvserve_spec_decode_num_accepted_tokens_per_pos_total")
                                .Help("Chains that accepted the draft at this position (0-based).")
                                .Register(r);
  structured_requests_ =
      &BuildCounter()
           .Name("kvserve_structured_output_requests_total")
           .Help(
               "Requests accepted with a structured-output constraint (JSON, schema, regex, "
               "choice or grammar).")
           .Register(r)
           .Add({});
  grammar_compile_ =
      histogram("kvserve_grammar_compile_seconds",
                "Time to compile one structured-output grammar against the vocabulary (cache "
                "misses only; off the engine thread).",
                kLatencyBuckets);
  grammar_compile_failures_ = &BuildCounter()
                                   .Name("kvserve_grammar_compile_failures_total")
                                   .Help("Grammar compilations that failed.")
                                   .Register(r)
                                   .Add({});
  grammar_mask_ = histogram(
      "kvserve_grammar_mask_seconds",
      "Per engine step with constrained requests: time filling and applying their token masks, "
      "summed over the requests.",
      kMaskBuckets);
  tool_call_requests_ =
      &BuildCounter()
           .Name("kvserve_tool_call_requests_total")
           .Help(
               "Chat requests whose output is read for tool calls (tools with tool_choice "
               "auto, required or a named function).")
           .Register(r)
           .Add({});
  tool_call_parse_failures_ =
      &BuildCounter()
           .Name("kvserve_tool_call_parse_failures_total")
           .Help("Choices whose tool-call text did not parse (returned as content).")
           .Register(r)
           .Add({});
}

void ServerMetrics::OnToolCallRequest() { tool_call_requests_->Increment(); }
void ServerMetrics::OnToolCallParseFailure() { tool_call_parse_failures_->Increment(); }

void ServerMetrics::OnGrammarCompiled(double seconds, bool ok) {
  grammar_compile_->Observe(seconds);
  if (!ok) grammar_compile_failures_->Increment();
}

void ServerMetrics::OnOutput(const scheduler::RequestOutput& output) {
  if (!output.token_ids.empty()) generation_tokens_->Increment(output.token_ids.size());
  if (!output.finished) return;
  const int reason = static_cast<int>(output.finish_reason);
  if (reason > 0 && reason < scheduler::kNumFinishReasons) finished_[reason]->Increment();
  prompt_tokens_->Increment(output.usage.prompt_tokens);
  prompt_len_->Observe(output.usage.prompt_tokens);
  generation_len_->Observe(output.usage.completion_tokens);
  e2e_->Observe(output.timings.e2e_s);
  // Zero where the event did not happen (output_stream.h).
  if (output.timings.queue_s > 0 || output.usage.completion_tokens > 0) {
    queue_time_->Observe(output.timings.queue_s);
  }
  const std::vector<double>& times = output.timings.token_times_s;
  if (!times.empty()) ttft_->Observe(output.timings.time_to_first_token_s);
  for (size_t i = 1; i < times.size(); ++i) itl_->Observe(times[i] - times[i - 1]);
}

void ServerMetrics::OnStep(const scheduler::StepRecord& step) {
  step_tokens_->Observe(step.num_tokens);
  step_duration_->Observe(step.duration_s);
  if (step.num_constrained_rows > 0) grammar_mask_->Observe(step.mask_s);
}

void ServerMetrics::OnHttpResponse(int status) {
  http_requests_->Add({{"code", std::to_string(status)}}).Increment();
}

void ServerMetrics::OnAccepted(Api api) { accepted_[static_cast<int>(api)]->Increment(); }

void ServerMetrics::OnHttpConnection(int delta) { http_connections_->Increment(delta); }

void ServerMetrics::OnRejected(Rejection why) { rejected_[static_cast<int>(why)]->Increment(); }

void ServerMetrics::SetKvEventsSource(const KvEventsPublisher* publisher) {
  std::lock_guard<std::mutex> lock(refresh_mu_);
  kv_events_ = publisher;
}

void ServerMetrics::Detach() {
  std::lock_guard<std::mutex> lock(refresh_mu_);
  loop_ = nullptr;
  kv_events_ = nullptr;
}

void ServerMetrics::Refresh() const {
  std::lock_guard<std::mutex> lock(refresh_mu_);
  if (loop_ == nullptr) return;
  const scheduler::SchedulerStats s = loop_->Stats();
  const scheduler::TimePoint last_step = loop_->LastStepTime();
  // The heartbeat is a steady-clock time; export it as Unix time.
  const double last_step_unix =
      last_step == scheduler::TimePoint{}
          ? 0.0
          : std::chrono::duration<double>(
                (std::chrono::system_clock::now() -
                 std::chrono::duration_cast<std::chrono::system_clock::duration>(
                     scheduler::Clock::now() - last_step))
                    .time_since_epoch())
                .count();
  engine_busy_->Set(loop_->busy() ? 1 : 0);
  last_step_timestamp_->Set(last_step_unix);
  running_->Set(s.num_running);
  waiting_->Set(s.num_waiting);
  const auto& pool = s.kv.pool;
  const int32_t capacity = pool.num_blocks - 1;  // the null block is never handed out
  blocks_in_use_->Set(pool.num_in_use);
  blocks_free_cached_->Set(pool.num_free_cached);
  blocks_free_uncached_->Set(pool.num_free_uncached);
  blocks_capacity_->Set(capacity);
  usage_ratio_->Set(capacity > 0 ? static_cast<double>(pool.num_in_use) / capacity : 0.0);
  blocks_cached_->Set(pool.num_cached);
  accounting_consistent_->Set(
      pool.num_in_use + pool.num_free_cached + pool.num_free_uncached == capacity ? 1 : 0);
  // Cumulative scheduler counts become counter increments (never negative:
  // the stats only grow).
  preemptions_->Increment(static_cast<double>(s.num_preemptions - last_.num_preemptions));
  structured_requests_->Increment(
      static_cast<double>(s.structured_requests - last_.structured_requests));
  spec_drafts_->Increment(static_cast<double>(s.spec_drafts - last_.spec_drafts));
  spec_draft_tokens_->Increment(static_cast<double>(s.spec_draft_tokens - last_.spec_draft_tokens));
  spec_accepted_tokens_->Increment(
      static_cast<double>(s.spec_accepted_tokens - last_.spec_accepted_tokens));
  for (size_t j = 0; j < s.spec_accepted_per_position.size(); ++j) {
    const int64_t before =
        j < last_.spec_accepted_per_position.size() ? last_.spec_accepted_per_position[j] : 0;
    spec_accepted_per_pos_->Add({{"position", std::to_string(j)}})
        .Increment(static_cast<double>(s.spec_accepted_per_position[j] - before));
  }
  prefix_queries_->Increment(
      static_cast<double>(s.kv.prefix_queried_tokens - last_.kv.prefix_queried_tokens));
  prefix_hits_->Increment(static_cast<double>(s.kv.prefix_hit_tokens - last_.kv.prefix_hit_tokens));
  last_ = s;
  if (kv_events_ != nullptr) {
    const KvEventsCounters k = kv_events_->counters();
    kv_events_published_->Increment(static_cast<double>(k.published - last_kv_events_.published));
    kv_events_dropped_->Increment(static_cast<double>(k.dropped - last_kv_events_.dropped));
    last_kv_events_ = k;
  }
}

std::vector<prometheus::MetricFamily> ServerMetrics::Collect() const {
  Refresh();
  return registry_->Collect();
}

}  // namespace kvserve::server
