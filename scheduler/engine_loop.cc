#include "scheduler/engine_loop.h"

#include <chrono>
#include <utility>

#include "common/check.h"

namespace kvserve::scheduler {

EngineLoop::EngineLoop(std::unique_ptr<EngineCore> core)
    : policy_(core->policy()), core_(std::move(core)) {
  stats_ = core_->Stats();
}

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  KVSERVE_CHECK(!thread_.joinable() && !stopping_);
  thread_ = std::thread([this] { Run(); });
}

void EngineLoop::Stop() {
  bool run_inline = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      run_inline = !thread_.joinable();
    }
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  if (run_inline) Shutdown();
}

absl::StatusOr<RequestId> EngineLoop::Submit(RequestParams params, OutputCallback callback) {
  absl::Status status = policy_.CheckSubmission(params);
  RejectReason reason = RejectReason::kInvalidArgument;
  const int32_t num_tokens = static_cast<int32_t>(params.prompt_tokens.size());
  RequestId id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status.ok() && stopping_) {
      reason = RejectReason::kShuttingDown;
      status = absl::UnavailableError("the engine is shutting down");
    }
    if (status.ok()) {
      status =
          policy_.CheckQueueLimits(published_waiting_ + inbox_submits_,
                                   published_waiting_tokens_ + inbox_tokens_, num_tokens, &reason);
    }
    if (!status.ok()) {
      ++submit_rejected_[static_cast<int>(reason)];
      return status;
    }
    id = next_id_.fetch_add(1, std::memory_order_relaxed);
    ++inbox_submits_;
    inbox_tokens_ += num_tokens;
    inbox_.push_back(Command{.abort = false,
                             .id = id,
                             .params = std::move(params),
                             .callback = std::move(callback),
                             .arrival = Clock::now()});
  }
  cv_.notify_one();
  return id;
}

void EngineLoop::Abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;  // shutdown aborts everything anyway
    Command c;
    c.abort = true;
    c.id = id;
    inbox_.push_back(std::move(c));
  }
  cv_.notify_one();
}

void EngineLoop::ResetPrefixCache(std::function<void(bool)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      Command c;
      c.reset_done = std::move(done);
      inbox_.push_back(std::move(c));
      done = nullptr;
    }
  }
  if (done) {
    done(false);
    return;
  }
  cv_.notify_one();
}

void EngineLoop::FlushKvEvents() {
  if (!kv_event_sink_) return;
  const double now_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  KvEventBatch batch = core_->TakeKvEvents(now_unix);
  if (!batch.events.empty()) kv_event_sink_(std::move(batch));
}

void EngineLoop::Apply(std::vector<Command>& commands) {
  for (Command& c : commands) {
    if (c.reset_done) {
      c.reset_done(core_->ResetPrefixCache());
      continue;
    }
    if (c.abort) {
      core_->Abort(c.id, Clock::now(), AbortCause::kClient);
      continue;
    }
    OutputCallback callback = c.callback;  // kept for a rejection below
    RejectReason reason = RejectReason::kInvalidArgument;
    absl::Status s =
        core_->AddRequest(c.id, std::move(c.params), std::move(c.callback), c.arrival, &reason);
    // Submit checked the same limits against counts at least as large, so
    // this is defensive: report it through the stream rather than drop it.
    if (!s.ok() && callback) {
      RequestOutput out;
      out.request_id = c.id;
      out.finished = true;
      out.finish_reason = FinishReason::kRejected;
      out.status = s;
      callback(std::move(out));
    }
  }
  commands.clear();
}

void EngineLoop::Publish(std::optional<Clock::duration> step_duration) {
  SchedulerStats s = core_->Stats();
  if (step_duration.has_value() && step_observer_) {
    step_observer_({.num_tokens = s.last_step_tokens,
                    .num_seqs = s.last_step_seqs,
                    .duration_s = std::chrono::duration<double>(*step_duration).count(),
                    .num_constrained_rows = s.last_step_constrained_rows,
                    .mask_s = s.last_step_mask_s});
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    published_waiting_ = s.num_waiting;
    published_waiting_tokens_ = s.num_waiting_tokens;
  }
  busy_.store(core_->HasUnfinished(), std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = std::move(s);
}

void EngineLoop::Run() {
  std::vector<Command> commands;
  bool last_step_empty = false;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] { return stopping_ || !inbox_.empty() || core_->HasUnfinished(); };
      if (last_step_empty) {
        // A step can be empty transiently (everyone preempted; admission
        // resumes next step). Never spin: wait a little or for a command.
        cv_.wait_for(lock, std::chrono::milliseconds(1),
                     [&] { return stopping_ || !inbox_.empty(); });
      } else {
        cv_.wait(lock, ready);
      }
      if (stopping_) break;
      commands.swap(inbox_);
      // The drained submissions are about to join the scheduler's queue:
      // keep counting them until the next publish.
      published_waiting_ += inbox_submits_;
      published_waiting_tokens_ += inbox_tokens_;
      inbox_submits_ = 0;
      inbox_tokens_ = 0;
    }
    Apply(commands);
    bool stepped = false;
    Clock::duration step_duration{};
    if (core_->HasUnfinished()) {
      const TimePoint step_start = Clock::now();
      stepped = core_->Step();
      if (stepped) {
        const TimePoint step_end = Clock::now();
        heartbeat_ns_.store(step_end.time_since_epoch().count(), std::memory_order_relaxed);
        step_duration = step_end - step_start;
      }
    }
    last_step_empty = core_->HasUnfinished() && !stepped;
    FlushKvEvents();
    Publish(stepped ? std::optional<Clock::duration>(step_duration) : std::nullopt);
  }
  Shutdown();
}

void EngineLoop::Shutdown() {
  std::vector<Command> commands;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    commands.swap(inbox_);
    inbox_submits_ = 0;
    inbox_tokens_ = 0;
  }
  // In inbox order, so a request submitted and aborted before shutdown gets
  // its aborted message once.
  Apply(commands);
  core_->scheduler().AbortAll(Clock::now(), AbortCause::kShutdown);
  FlushKvEvents();
  Publish(std::nullopt);
}

SchedulerStats EngineLoop::Stats() const {
  SchedulerStats s;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    s = stats_;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < kNumRejectReasons; ++i) s.rejected[i] += submit_rejected_[i];
  return s;
}

TimePoint EngineLoop::LastStepTime() const {
  return TimePoint(Clock::duration(heartbeat_ns_.load(std::memory_order_relaxed)));
}

}  // namespace kvserve::scheduler
