// EngineLoop: the thread that owns the serving core.
//
// Thread affinity:
// - One loop thread owns the EngineCore (Scheduler, KvCacheManager,
//   ModelRunner, every Request) from Start() until Stop() returns; no other
//   thread touches them.
// - Submit, Abort, Stats, LastStepTime and Stop may be called from any
//   thread. Submit and Abort never block on the loop: they append a command
//   to an inbox (a mutex-protected vector the loop swaps out once per
//   iteration: a multi-producer single-consumer queue) and notify.
// - Output callbacks run on the loop thread (see output_stream.h).
//
// The loop: wait (condition variable, no spinning) until there is a command
// or an unfinished request; apply the commands in arrival order; run one
// EngineCore step; publish the heartbeat, the stats and the waiting-queue
// counts Submit checks its limits against.
//
// Queue limits are enforced synchronously in Submit, exactly: the counts are
// the scheduler's waiting queue as of the last publish plus the submissions
// still in the inbox (the scheduler's queue only shrinks between a publish and
// the next inbox swap, apart from these).
//
// KV-cache events (EngineConfig::enable_kv_events): after every iteration
// that changed the cache (a step, a reset, the shutdown's aborts) the loop
// takes the recorded events as one batch and hands it to the KvEventSink, on
// the loop thread, in iteration order.
//
// Stop(): no command is accepted afterwards (Submit: Unavailable); the loop
// finishes its current step, then every outstanding request (in the inbox or
// the scheduler) finishes as kAborted (cause kShutdown), its final output
// delivered before Stop() returns; the thread is joined.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "scheduler/capacity_policy.h"
#include "scheduler/engine_core.h"
#include "scheduler/stats.h"

namespace kvserve::scheduler {

// One model step, for metrics (tokens per step, step duration).
struct StepRecord {
  int32_t num_tokens = 0;            // tokens computed in the step
  int32_t num_seqs = 0;              // requests in the step
  double duration_s = 0;             // schedule + model + sample + update
  int32_t num_constrained_rows = 0;  // rows sampled under a grammar
  double mask_s = 0;                 // their grammar masks, summed over the rows
};
// Called on the loop thread after every model step; must be cheap and must
// not block.
using StepObserver = std::function<void(const StepRecord&)>;
// Receives each iteration's KV-cache events (never an empty batch) on the
// loop thread; must not block (hand the batch to another thread's bounded
// queue).
using KvEventSink = std::function<void(KvEventBatch)>;

class EngineLoop {
 public:
  explicit EngineLoop(std::unique_ptr<EngineCore> core);
  ~EngineLoop();  // Stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Before Start() only.
  void SetStepObserver(StepObserver observer) { step_observer_ = std::move(observer); }
  void SetKvEventSink(KvEventSink sink) { kv_event_sink_ = std::move(sink); }
  void Start();
  // Idempotent. Also finishes outstanding requests when never started.
  void Stop();

  // The request's id, or InvalidArgument (can never run; names the field),
  // ResourceExhausted (waiting queue full), Unavailable (stopping). On error
  // the callback is never called. On success it receives every output, the
  // last one with finished == true, on the loop thread.
  absl::StatusOr<RequestId> Submit(RequestParams params, OutputCallback callback);
  // Finishes the request as kAborted wherever it is, freeing its blocks.
  // Unknown or finished ids: a no-op.
  void Abort(RequestId id);
  // Drops every cached prefix block, as vLLM's /reset_prefix_cache: `done`
  // gets true, on the loop thread, or false when some request held blocks
  // (nothing changed) or the loop is stopping.
  void ResetPrefixCache(std::function<void(bool)> done);

  // Copy of the snapshot published after the last loop iteration.
  SchedulerStats Stats() const;
  // Heartbeat: when the last model step completed (the epoch if none has).
  TimePoint LastStepTime() const;
  // True while the loop has requests to serve (a stale heartbeat while idle
  // is healthy).
  bool busy() const { return busy_.load(std::memory_order_relaxed); }

 private:
  struct Command {
    bool abort = false;
    std::function<void(bool)> reset_done;  // set: a prefix-cache reset
    RequestId id = 0;
    RequestParams params;
    OutputCallback callback;
    TimePoint arrival;
  };

  void Run();
  void Apply(std::vector<Command>& commands);
  // step_duration: set when a model step just ran (fed to the observer).
  void Publish(std::optional<Clock::duration> step_duration);
  void Shutdown();  // loop thread (or Stop() when never started)
  void FlushKvEvents();

  const CapacityPolicy policy_;       // static checks and limits, any thread
  std::unique_ptr<EngineCore> core_;  // loop thread only
  StepObserver step_observer_;        // set before Start, then loop thread only
  KvEventSink kv_event_sink_;         // set before Start, then loop thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Command> inbox_;                                // guarded by mu_
  bool stopping_ = false;                                     // guarded by mu_
  bool shut_down_ = false;                                    // guarded by mu_
  int32_t inbox_submits_ = 0;                                 // guarded by mu_
  int64_t inbox_tokens_ = 0;                                  // guarded by mu_
  int32_t published_waiting_ = 0;                             // guarded by mu_
  int64_t published_waiting_tokens_ = 0;                      // guarded by mu_
  std::array<int64_t, kNumRejectReasons> submit_rejected_{};  // guarded by mu_

  std::atomic<RequestId> next_id_{1};
  std::atomic<int64_t> heartbeat_ns_{0};
  std::atomic<bool> busy_{false};

  mutable std::mutex stats_mu_;
  SchedulerStats stats_;  // guarded by stats_mu_

  std::thread thread_;
};

}  // namespace kvserve::scheduler
