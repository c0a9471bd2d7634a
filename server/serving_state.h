// ServingState: what every RPC handler (and HTTP endpoint) shares. Owned by the daemon's main;
// outlives the gRPC server (main shuts the server down first).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "engine/model.h"
#include "kvserve/v1/kvserve.pb.h"
#include "scheduler/engine_loop.h"
#include "server/auth.h"
#include "server/metrics.h"

namespace kvserve::server {

// One log line for a finished request (both APIs; --log_requests). Any thread.
void LogFinished(const std::string& request_id, const scheduler::RequestOutput& out);

class ServingState {
 public:
  ServingState(const engine::Model& model, scheduler::EngineLoop& loop, ServerMetrics& metrics,
               BearerAuth auth, v1::GetModelInfoResponse model_info, bool log_requests)
      : model_(model),
        loop_(loop),
        metrics_(metrics),
        auth_(std::move(auth)),
        model_info_(std::move(model_info)),
        log_requests_(log_requests) {}

  const engine::Model& model() const { return model_; }
  const engine::Tokenizer* tokenizer() const { return model_.tokenizer.get(); }
  int32_t vocab_size() const { return model_info_.vocab_size(); }
  scheduler::EngineLoop& loop() { return loop_; }
  ServerMetrics& metrics() { return metrics_; }
  const BearerAuth& auth() const { return auth_; }
  const v1::GetModelInfoResponse& model_info() const { return model_info_; }
  bool log_requests() const { return log_requests_; }

  // Draining: set once by the signal handler thread; every new RPC is then
  // refused with UNAVAILABLE.
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

  // Generate streams alive (constructed, OnDone not yet run).
  void StreamStarted() {
    std::lock_guard<std::mutex> lock(mu_);
    ++streams_;
  }
  void StreamDone() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--streams_ == 0) cv_.notify_all();
  }
  // True if every stream ended before `deadline`.
  bool WaitForStreams(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline, [&] { return streams_ == 0; });
  }

 private:
  const engine::Model& model_;
  scheduler::EngineLoop& loop_;
  ServerMetrics& metrics_;
  const BearerAuth auth_;
  const v1::GetModelInfoResponse model_info_;
  const bool log_requests_;
  std::atomic<bool> draining_{false};

  std::mutex mu_;
  std::condition_variable cv_;
  int64_t streams_ = 0;  // guarded by mu_
};

}  // namespace kvserve::server
