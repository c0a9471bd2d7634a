// WaitingQueue: WAITING requests in service order (CapacityPolicy::ServedBefore:
// lower priority value first, then earlier arrival), with their token count.
//
// A preempted request re-enters with its original arrival number, which puts
// it at the front of its priority class: admission is strictly in queue
// order (the head blocks the rest), so every request of its class still
// waiting arrived after it. Holds raw pointers; the Scheduler owns requests.
// Thread affinity: engine loop thread.
#pragma once

#include <cstdint>
#include <set>

#include "scheduler/capacity_policy.h"
#include "scheduler/request.h"

namespace kvserve::scheduler {

class WaitingQueue {
 public:
  bool empty() const { return queue_.empty(); }
  int32_t size() const { return static_cast<int32_t>(queue_.size()); }
  // Sum of num_tokens() (prompt + output so far) of the queued requests.
  int64_t num_tokens() const { return num_tokens_; }

  Request* front() const { return *queue_.begin(); }
  void Insert(Request* r);
  void Remove(Request* r);  // r must be queued

  auto begin() const { return queue_.begin(); }
  auto end() const { return queue_.end(); }

 private:
  struct Order {
    bool operator()(const Request* a, const Request* b) const {
      return CapacityPolicy::ServedBefore(a->priority(), a->arrival_seq(), b->priority(),
                                          b->arrival_seq());
    }
  };
  std::set<Request*, Order> queue_;
  int64_t num_tokens_ = 0;
};

}  // namespace kvserve::scheduler
