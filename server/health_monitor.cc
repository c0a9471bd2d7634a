#include "server/health_monitor.h"

#include "common/logging.h"

namespace kvserve::server {

inline constexpr const char* kKvServeService = "kvserve.v1.KvServe";

bool EngineLooksAlive(std::optional<TimePoint> busy_since, TimePoint last_step, TimePoint now,
                      Clock::duration stall_timeout) {
  if (!busy_since.has_value()) return true;  // idle: nothing to make progress on
  const TimePoint progress = std::max(*busy_since, last_step);
  return now - progress < stall_timeout;
}

HealthMonitor::HealthMonitor(grpc::HealthCheckServiceInterface* health,
                             const scheduler::EngineLoop* loop, Clock::duration stall_timeout,
                             Clock::duration poll)
    : health_(health), loop_(loop), stall_timeout_(stall_timeout), poll_(poll) {}

HealthMonitor::~HealthMonitor() { Stop(); }

void HealthMonitor::Start() {
  Publish(true);
  thread_ = std::thread([this] { Run(); });
}

void HealthMonitor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HealthMonitor::SetDraining() {
  draining_.store(true);
  cv_.notify_all();  // publish now, not at the next poll
}

void HealthMonitor::Publish(bool serving) {
  if (published_ == serving) return;
  published_ = serving;
  health_->SetServingStatus("", serving);
  health_->SetServingStatus(kKvServeService, serving);
  if (!serving && !draining_.load()) {
    Log().warn("health: NOT_SERVING: the engine loop made no progress for {} s",
               std::chrono::duration<double>(stall_timeout_).count());
  }
}

void HealthMonitor::Run() {
  std::optional<TimePoint> busy_since;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    const TimePoint now = Clock::now();
    if (!loop_->busy()) {
      busy_since.reset();
    } else if (!busy_since.has_value()) {
      busy_since = now;
    }
    const bool alive = EngineLooksAlive(busy_since, loop_->LastStepTime(), now, stall_timeout_);
    Publish(alive && !draining_.load());
    cv_.wait_for(lock, poll_, [&] { return stop_ || (draining_.load() && published_ == true); });
  }
}

}  // namespace kvserve::server
