// ServerMetrics: the Prometheus metrics of one daemon (prometheus-cpp), named
// after vLLM's set under a `kvserve_` prefix so that dashboards port easily
// (docs/server.md, "Metrics", lists them).
//
// Three sources:
// - gauges (the engine heartbeat included) and scheduler counters (preemptions, prefix-cache
// tokens) are read
//   from EngineLoop::Stats() at scrape time (Collect below): the values are
//   exact as of the loop's last iteration, and nothing runs between scrapes;
// - per-request counters and histograms are fed by OnOutput from each
//   request's output callback (engine loop thread): generation tokens as they
//   stream, the rest when the request finishes;
// - per-step histograms by OnStep (engine loop thread), rejections by
//   OnRejected (gRPC threads).
// Every method is thread-safe; the hot-path ones (OnOutput, OnStep) only
// touch prometheus-cpp's atomics and per-histogram mutexes, never block on
// I/O and format nothing.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "scheduler/engine_loop.h"
#include "scheduler/output_stream.h"
#include "scheduler/stats.h"
#include "server/kv_events/kv_events_publisher.h"

namespace kvserve::server {

// Why the server refused a request before it reached the engine queue.
enum class Rejection : int { kInvalidArgument = 0, kQueueFull, kUnavailable, kUnauthenticated };
inline constexpr int kNumRejections = 4;

struct ServerInfoLabels {
  std::string model;
  std::string backend;
  int32_t block_size = 0;
  std::string kv_cache_dtype;  // --kv_cache_dtype
  int64_t kv_cache_capacity_tokens = 0;
  int64_t num_usable_kv_blocks = 0;  // the pool's blocks, the null block excluded
  std::string eos_token_ids;         // "2,0": every id that ends generation
  std::string version;
};

class ServerMetrics : public prometheus::Collectable {
 public:
  // `loop` (its Stats and heartbeat are read at scrape time) must outlive
  // this object.
  ServerMetrics(const ServerInfoLabels& info, const scheduler::EngineLoop& loop);

  void OnOutput(const scheduler::RequestOutput& output);
  void OnStep(const scheduler::StepRecord& step);
  void OnRejected(Rejection why);
  // The HTTP API (server/http/, its io threads): a response's status code
  // as it starts, and connections opened (+1) and closed (-1).
  void OnHttpResponse(int status);
  // A request accepted into the engine queue, by frontend (an HTTP request
  // with n choices is n engine requests).
  enum class Api : int { kGrpc = 0, kHttp = 1 };
  void OnAccepted(Api api);
  void OnHttpConnection(int delta);
  // A grammar compilation finished (the compile thread).
  void OnGrammarCompiled(double seconds, bool ok);
  // Tool calling (HTTP io threads): a chat request read for tool calls, and
  // a choice whose tool-call text did not parse.
  void OnToolCallRequest();
  void OnToolCallParseFailure();
  // Stops reading the loop: later scrapes return the last values. After it
  // returns the loop may be destroyed.
  // The KV-events publisher's counters, read at scrape time (before the
  // first scrape; the publisher must outlive it or Detach must come first).
  void SetKvEventsSource(const KvEventsPublisher* publisher);
  // Stops reading the loop (and the publisher): later scrapes return the
  // last values. After it returns the loop may be destroyed.
  void Detach();

  // prometheus::Collectable: refreshes the scrape-time values, then returns
  // every family.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  void Refresh() const;

  mutable std::mutex refresh_mu_;
  const scheduler::EngineLoop* loop_;             // guarded by refresh_mu_; null once detached
  const KvEventsPublisher* kv_events_ = nullptr;  // guarded by refresh_mu_; may be null
  std::shared_ptr<prometheus::Registry> registry_;

  // Scrape-time gauges.
  prometheus::Gauge* running_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* blocks_in_use_;
  prometheus::Gauge* blocks_free_cached_;
  prometheus::Gauge* blocks_free_uncached_;
  prometheus::Gauge* blocks_capacity_;
  prometheus::Gauge* usage_ratio_;
  prometheus::Gauge* accounting_consistent_;
  prometheus::Gauge* blocks_cached_;
  prometheus::Gauge* engine_busy_;
  prometheus::Gauge* last_step_timestamp_;

  // Counters mirrored from the scheduler's cumulative stats (by delta).
  prometheus::Counter* preemptions_;
  prometheus::Counter* prefix_queries_;
  prometheus::Counter* prefix_hits_;
  prometheus::Counter* structured_requests_;
  prometheus::Counter* spec_drafts_;
  prometheus::Counter* spec_draft_tokens_;
  prometheus::Counter* spec_accepted_tokens_;
  prometheus::Family<prometheus::Counter>* spec_accepted_per_pos_;  // label position (0-based)
  mutable scheduler::SchedulerStats last_;                          // guarded by refresh_mu_

  // KV-cache events, mirrored from the publisher's counters (by delta).
  prometheus::Counter* kv_events_published_;
  prometheus::Counter* kv_events_dropped_;
  mutable KvEventsCounters last_kv_events_;  // guarded by refresh_mu_

  // Per-request.
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generation_tokens_;
  std::array<prometheus::Counter*, scheduler::kNumFinishReasons> finished_{};
  std::array<prometheus::Counter*, kNumRejections> rejected_{};
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* e2e_;
  prometheus::Histogram* queue_time_;
  prometheus::Histogram* prompt_len_;
  prometheus::Histogram* generation_len_;

  // HTTP API.
  prometheus::Family<prometheus::Counter>* http_requests_;  // labels are thread-safe to add
  prometheus::Gauge* http_connections_;
  std::array<prometheus::Counter*, 2> accepted_{};  // by Api

  // Per-step.
  prometheus::Histogram* step_tokens_;
  prometheus::Histogram* step_duration_;

  // Structured outputs.
  prometheus::Histogram* grammar_compile_;
  prometheus::Counter* grammar_compile_failures_;
  prometheus::Counter* tool_call_requests_;
  prometheus::Counter* tool_call_parse_failures_;
  prometheus::Histogram* grammar_mask_;
};

}  // namespace kvserve::server
