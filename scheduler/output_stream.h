// Per-request output: what the engine loop tells a request's consumer, and a
// blocking queue adapter for tests and command-line tools.
//
// Delivery contract: every accepted request (Submit returned OK) gets a
// sequence of RequestOutput messages through its OutputCallback, exactly one
// of which has finished == true, and that one is the last. Each message
// carries what is new since the previous one (token ids, text, logprobs); the
// final message also carries the finish reason, usage and timings.
//
// Thread affinity: the callback is invoked on the engine loop thread, between
// steps. It must not block and must not call back into the EngineLoop's
// Submit/Stop (Abort is fine: it only enqueues). A gRPC reactor queues the
// message and returns; OutputQueue below is the simple blocking adapter.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/sampling/sampler.h"

namespace kvserve::scheduler {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

enum class FinishReason : int {
  kNone = 0,    // not finished
  kStopToken,   // EOS (unless ignore_eos) or one of stop_token_ids
  kStopString,  // a stop string appeared in the text (it is not emitted)
  kLength,      // max_tokens reached
  kAborted,     // Abort() or engine shutdown
  kExpired,     // the deadline passed (waiting or running)
  kRejected,    // never admitted: invalid or over the queue limits
  kError,       // the model step failed; status says why
};
inline constexpr int kNumFinishReasons = 8;
std::string_view FinishReasonName(FinishReason reason);

struct Usage {
  int32_t prompt_tokens = 0;
  // Prompt tokens whose K/V came from the prefix cache at the request's first
  // admission (a resume after preemption is not counted here).
  int32_t cached_prompt_tokens = 0;
  int32_t completion_tokens = 0;
};

// Seconds. Zero where the event did not happen (e.g. no first token).
struct Timings {
  double queue_s = 0;  // arrival -> first admission
  double time_to_first_token_s = 0;
  double e2e_s = 0;  // arrival -> finish
  // token_times_s[i]: arrival -> emission of output token i.
  std::vector<double> token_times_s;
};

struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0;
  std::vector<engine::TokenLogprob> top;  // best first; sampling.num_logprobs entries
  int32_t rank = 0;  // prompt logprobs: the token's rank (1: the top); 0 for sampled tokens
};

struct RequestOutput {
  int64_t request_id = 0;
  std::vector<int32_t> token_ids;       // new output tokens (a stop token included)
  std::string text;                     // new text, valid UTF-8, stop string excluded
  std::vector<TokenLogprobs> logprobs;  // one per new token when requested
  // With RequestParams::num_prompt_logprobs >= 0: prompt tokens 1..n-1 scored
  // by the prefill (token 0 has no context), all in one message: the one
  // that carries the first output token, or the final one (max_tokens 0).
  std::vector<TokenLogprobs> prompt_logprobs;
  bool finished = false;
  // Set on the final message only.
  FinishReason finish_reason = FinishReason::kNone;
  absl::Status status;      // kError / kRejected detail; OK otherwise
  std::string stop_string;  // kStopString: which one matched
  int32_t stop_token = -1;  // kStopToken: which id
  Usage usage;
  Timings timings;
};

using OutputCallback = std::function<void(RequestOutput&&)>;

// Blocking adapter: a thread-safe FIFO of one request's outputs. Hand
// Callback() to Submit and drain with Pop/PopFor/Collect from any thread.
class OutputQueue : public std::enable_shared_from_this<OutputQueue> {
 public:
  static std::shared_ptr<OutputQueue> Create() {
    return std::shared_ptr<OutputQueue>(new OutputQueue);
  }

  // Keeps the queue alive for as long as the engine holds the callback.
  OutputCallback Callback();
  void Push(RequestOutput&& out);

  RequestOutput Pop();  // blocks
  std::optional<RequestOutput> PopFor(std::chrono::milliseconds timeout);

  // Everything a request produced, merged.
  struct Collected {
    std::vector<int32_t> token_ids;
    std::string text;
    std::vector<TokenLogprobs> logprobs;
    std::vector<TokenLogprobs> prompt_logprobs;
    int num_messages = 0;
    RequestOutput final;  // the finished message (its own deltas are merged above)
  };
  // Blocks until the final message.
  Collected Collect();

 private:
  OutputQueue() = default;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
};

}  // namespace kvserve::scheduler
