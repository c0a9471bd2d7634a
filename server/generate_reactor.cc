#include "server/generate_reactor.h"

#include <chrono>
#include <string>
#include <utility>

#include "common/logging.h"
#include "server/request_convert.h"
#include "server/status_map.h"

namespace kvserve::server {
namespace {

Rejection RejectionOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      return Rejection::kQueueFull;
    case absl::StatusCode::kUnavailable:
      return Rejection::kUnavailable;
    case absl::StatusCode::kUnauthenticated:
      return Rejection::kUnauthenticated;
    default:
      return Rejection::kInvalidArgument;
  }
}

// The gRPC deadline (system clock) as a scheduler deadline (steady clock).
std::optional<scheduler::TimePoint> SchedulerDeadline(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return std::nullopt;
  const auto remaining = deadline - std::chrono::system_clock::now();
  return scheduler::Clock::now() +
         std::chrono::duration_cast<scheduler::Clock::duration>(remaining);
}

}  // namespace

void LogFinished(const std::string& request_id, const scheduler::RequestOutput& out) {
  Log().info(
      "request id={} prompt_tokens={} cached_tokens={} completion_tokens={} queue_ms={:.1f} "
      "ttft_ms={:.1f} e2e_ms={:.1f} finish={}",
      request_id, out.usage.prompt_tokens, out.usage.cached_prompt_tokens,
      out.usage.completion_tokens, out.timings.queue_s * 1e3,
      out.timings.time_to_first_token_s * 1e3, out.timings.e2e_s * 1e3,
      scheduler::FinishReasonName(out.finish_reason));
}

GenerateReactor::GenerateReactor(ServingState& state, grpc::CallbackServerContext* context,
                                 const v1::GenerateRequest& request)
    : state_(state), context_(context), stream_(std::make_shared<Stream>()) {
  state_.StreamStarted();
  stream_->reactor = this;
  Begin(request);
}

void GenerateReactor::Begin(const v1::GenerateRequest& request) {
  grpc::CallbackServerContext* context = context_;
  if (state_.draining()) {
    return Refuse(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is draining"));
  }
  if (absl::Status s = state_.auth().Check(*context); !s.ok()) return Refuse(ToGrpcStatus(s));
  absl::StatusOr<scheduler::RequestParams> params = ToRequestParams(
      request, state_.tokenizer(), state_.vocab_size(), state_.model().sampling_defaults);
  if (!params.ok()) return Refuse(ToGrpcStatus(params.status()));
  params->deadline = SchedulerDeadline(*context);
  request_id_ = request.request_id();

  // The callback may run on the engine loop before Submit even returns.
  scheduler::OutputCallback callback = [stream = stream_, &state = state_, client_id = request_id_](
                                           scheduler::RequestOutput&& output) {
    Deliver(stream, state, client_id, std::move(output));
  };
  absl::StatusOr<scheduler::RequestId> id =
      state_.loop().Submit(*std::move(params), std::move(callback));
  if (!id.ok()) return Refuse(ToGrpcStatus(id.status()));
  engine_id_ = *id;
  submitted_ = true;
  state_.metrics().OnAccepted(ServerMetrics::Api::kGrpc);
}

void GenerateReactor::Refuse(const grpc::Status& status) {
  state_.metrics().OnRejected(RejectionOf(
      absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message())));
  std::lock_guard<std::mutex> lock(stream_->mu);
  stream_->finishing = true;
  Finish(status);
}

void GenerateReactor::Deliver(const std::shared_ptr<Stream>& stream, ServingState& state,
                              const std::string& client_id, scheduler::RequestOutput&& output) {
  state.metrics().OnOutput(output);
  if (output.finished && state.log_requests()) {
    LogFinished(client_id.empty() ? std::to_string(output.request_id) : client_id, output);
  }
  std::unique_lock<std::mutex> lock(stream->mu);
  if (stream->reactor == nullptr || stream->cancelled || stream->finishing) return;
  stream->final_queued = stream->final_queued || output.finished;
  stream->pending.push_back(std::move(output));
  if (!stream->writing) stream->reactor->Act(lock);
}

bool GenerateReactor::NextActionLocked(bool* finish) {
  Stream& s = *stream_;
  *finish = false;
  if (s.finishing || s.writing) return false;
  if (s.cancelled) {
    finish_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "the request was cancelled");
    s.finishing = *finish = true;
    return false;
  }
  if (final_written_) {  // the write carrying the final output completed
    s.finishing = *finish = true;
    return false;
  }
  if (s.pending.empty()) return false;
  response_.Clear();
  for (const scheduler::RequestOutput& out : s.pending) {
    AppendOutput(out, &response_);
    if (out.finished) {
      response_.set_request_id(request_id_.empty() ? std::to_string(out.request_id) : request_id_);
      finish_status_ = FinalStatus(out);
      final_written_ = true;  // takes effect once this write completes (OnWriteDone ok)
    }
  }
  s.pending.clear();
  s.writing = true;
  return true;
}

void GenerateReactor::Act(std::unique_lock<std::mutex>& lock) {
  bool finish = false;
  const bool write = NextActionLocked(&finish);
  lock.unlock();
  if (write) {
    StartWrite(&response_);
  } else if (finish) {
    Finish(finish_status_);
  }
}

bool GenerateReactor::CancelledByDeadline() const {
  // The client's deadline timer fires before the server's copy of the
  // deadline by the call's one-way latency, and the client then cancels: a
  // cancel this close to the deadline is the deadline's.
  constexpr auto kClientLead = std::chrono::milliseconds(200);
  const auto deadline = context_->deadline();
  return deadline != std::chrono::system_clock::time_point::max() &&
         std::chrono::system_clock::now() + kClientLead >= deadline;
}

void GenerateReactor::OnWriteDone(bool ok) {
  bool abort = false;
  std::unique_lock<std::mutex> lock(stream_->mu);
  stream_->writing = false;
  if (!ok) {
    // The stream broke (client gone): stop the request in the engine.
    stream_->cancelled = true;
    abort = submitted_ && !stream_->final_queued && !CancelledByDeadline();
  }
  Act(lock);
  if (abort) state_.loop().Abort(engine_id_);
}

void GenerateReactor::OnCancel() {
  std::unique_lock<std::mutex> lock(stream_->mu);
  stream_->cancelled = true;
  // A cancel caused by the call's deadline is left to the scheduler, which
  // holds the same deadline and finishes the request as expired at its next
  // iteration (so it is counted as "deadline", not "aborted"). Any other
  // cancel aborts it now; either way its KV blocks are freed and its final
  // output is dropped.
  const bool abort = submitted_ && !stream_->final_queued && !CancelledByDeadline();
  Act(lock);  // finishes now unless a write is in flight (then OnWriteDone does)
  if (abort) state_.loop().Abort(engine_id_);
}

void GenerateReactor::OnDone() {
  {
    std::lock_guard<std::mutex> lock(stream_->mu);
    stream_->reactor = nullptr;
  }
  state_.StreamDone();
  delete this;
}

}  // namespace kvserve::server
