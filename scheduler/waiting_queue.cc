#include "scheduler/waiting_queue.h"

#include "common/check.h"

namespace kvserve::scheduler {

void WaitingQueue::Insert(Request* r) {
  KVSERVE_CHECK(r->state() == RequestState::kWaiting);
  const bool inserted = queue_.insert(r).second;
  KVSERVE_CHECK(inserted);
  num_tokens_ += r->num_tokens();
}

void WaitingQueue::Remove(Request* r) {
  const size_t erased = queue_.erase(r);
  KVSERVE_CHECK(erased == 1);
  num_tokens_ -= r->num_tokens();
}

}  // namespace kvserve::scheduler
