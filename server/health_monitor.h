// HealthMonitor: keeps grpc.health.v1 truthful. SERVING only while the model
// is loaded, the server is not draining, and the engine loop is alive: idle,
// or busy with a step completed within the stall timeout. A stalled loop
// (e.g. a step that never returns) turns NOT_SERVING so that Kubernetes
// stops routing to it and can restart it.
//
// Thread: its own, polling every `poll` interval; SetDraining from any
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "grpcpp/health_check_service_interface.h"
#include "scheduler/engine_loop.h"

namespace kvserve::server {

using scheduler::Clock;
using scheduler::TimePoint;

// The decision, pure for unit tests. busy_since: when the loop was first seen
// busy in the current busy period (nullopt while idle); a loop that just
// became busy has not stalled yet even if its last step is old.
bool EngineLooksAlive(std::optional<TimePoint> busy_since, TimePoint last_step, TimePoint now,
                      Clock::duration stall_timeout);

class HealthMonitor {
 public:
  // Service names reported: "" (the whole server) and the KvServe service.
  HealthMonitor(grpc::HealthCheckServiceInterface* health, const scheduler::EngineLoop* loop,
                Clock::duration stall_timeout,
                Clock::duration poll = std::chrono::milliseconds(100));
  ~HealthMonitor();  // Stop()

  void Start();
  void Stop();
  void SetDraining();  // NOT_SERVING from now on

 private:
  void Run();
  void Publish(bool serving);

  grpc::HealthCheckServiceInterface* const health_;
  const scheduler::EngineLoop* const loop_;
  const Clock::duration stall_timeout_;
  const Clock::duration poll_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::atomic<bool> draining_{false};
  std::optional<bool> published_;  // monitor thread only
  std::thread thread_;
};

}  // namespace kvserve::server
