#include "scheduler/output_stream.h"

#include <utility>

namespace kvserve::scheduler {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStopToken:
      return "stop_token";
    case FinishReason::kStopString:
      return "stop_string";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAborted:
      return "aborted";
    case FinishReason::kExpired:
      return "expired";
    case FinishReason::kRejected:
      return "rejected";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

OutputCallback OutputQueue::Callback() {
  return [self = shared_from_this()](RequestOutput&& out) { self->Push(std::move(out)); };
}

void OutputQueue::Push(RequestOutput&& out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(out));
  }
  cv_.notify_all();
}

RequestOutput OutputQueue::Pop() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty(); });
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

std::optional<RequestOutput> OutputQueue::PopFor(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

OutputQueue::Collected OutputQueue::Collect() {
  Collected c;
  while (true) {
    RequestOutput out = Pop();
    ++c.num_messages;
    c.token_ids.insert(c.token_ids.end(), out.token_ids.begin(), out.token_ids.end());
    c.text += out.text;
    for (auto& lp : out.logprobs) c.logprobs.push_back(std::move(lp));
    for (auto& lp : out.prompt_logprobs) c.prompt_logprobs.push_back(std::move(lp));
    if (out.finished) {
      c.final = std::move(out);
      return c;
    }
  }
}

}  // namespace kvserve::scheduler
