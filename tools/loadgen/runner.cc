#include "tools/loadgen/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "tools/loadgen/progress.h"

namespace kvserve::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Shared by the dispatcher and every call of one phase. Held through a
// shared_ptr by each call too, so that a call that never ended (see
// kCancelGraceS) can still write into it after RunPhase returned.
struct PhaseState {
  std::mutex mu;
  std::condition_variable cv;
  // Guarded by mu.
  int64_t in_flight = 0;
  int64_t done = 0;
  int64_t errors = 0;
  std::vector<RequestRecord> results;  // slot i written once, by call i's OnDone
};

// One Generate stream. Owned by the dispatcher (never deleted by gRPC); the
// record is touched only by this call's reactions until OnDone moves it
// into the phase's results under the phase mutex.
class GenerateCall final : public grpc::ClientReadReactor<kvserve::v1::GenerateResponse> {
 public:
  GenerateCall(RequestRecord record, std::shared_ptr<PhaseState> phase, Clock::time_point t0)
      : record_(std::move(record)), phase_(std::move(phase)), t0_(t0) {}

  void Start(kvserve::v1::KvServe::Stub* stub, kvserve::v1::GenerateRequest request,
             double timeout_s) {
    request_ = std::move(request);
    const auto now = Clock::now();
    if (timeout_s > 0) {
      context_.set_deadline(std::chrono::system_clock::now() +
                            std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                std::chrono::duration<double>(timeout_s)));
    }
    record_.sent = true;
    record_.send_s = SecondsBetween(t0_, now);
    stub->async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }

  // Thread-safe; a no-op once the call is done.
  void Cancel() {
    cancel_requested_.store(true);
    context_.TryCancel();
  }

  bool done() const { return done_.load(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone follows
    const double now = SecondsBetween(t0_, Clock::now());
    if (response_.token_ids_size() > 0) {
      record_.chunk_s.push_back(now);
      record_.chunk_tokens.push_back(response_.token_ids_size());
      record_.num_tokens += response_.token_ids_size();
    }
    if (response_.finished()) {
      record_.finished = true;
      switch (response_.finish_reason()) {
        case kvserve::v1::FINISH_REASON_STOP:
          record_.finish_reason = "stop";
          break;
        case kvserve::v1::FINISH_REASON_LENGTH:
          record_.finish_reason = "length";
          break;
        case kvserve::v1::FINISH_REASON_ABORTED:
          record_.finish_reason = "aborted";
          break;
        case kvserve::v1::FINISH_REASON_DEADLINE:
          record_.finish_reason = "deadline";
          break;
        case kvserve::v1::FINISH_REASON_ERROR:
          record_.finish_reason = "error";
          break;
        default:
          record_.finish_reason = "unspecified";
          break;
      }
      record_.usage_prompt_tokens = response_.usage().prompt_tokens();
      record_.usage_cached_prompt_tokens = response_.usage().cached_prompt_tokens();
      record_.usage_completion_tokens = response_.usage().completion_tokens();
    }
    response_.Clear();
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    record_.end_s = SecondsBetween(t0_, Clock::now());
    record_.status_code = static_cast<int>(status.error_code());
    record_.status_message = status.error_message();
    record_.cancelled_by_limit = cancel_requested_.load() && !status.ok();
    std::lock_guard<std::mutex> lock(phase_->mu);
    const bool ok = record_.ok();
    phase_->results[record_.index] = std::move(record_);
    --phase_->in_flight;
    ++phase_->done;
    if (!ok) ++phase_->errors;
    done_.store(true);
    // Notified under the lock: once the dispatcher sees in_flight == 0 it may
    // delete this call, so nothing below the lock may touch `this`.
    phase_->cv.notify_all();
  }

 private:
  RequestRecord record_;
  std::shared_ptr<PhaseState> phase_;
  const Clock::time_point t0_;
  grpc::ClientContext context_;
  kvserve::v1::GenerateRequest request_;
  kvserve::v1::GenerateResponse response_;
  std::atomic<bool> cancel_requested_{false};
  std::atomic<bool> done_{false};
};

RequestRecord RecordFor(const RequestSpec& spec) {
  RequestRecord r;
  r.index = spec.index;
  r.group = spec.group;
  r.prompt_len = spec.prompt_text.empty() ? static_cast<int64_t>(spec.prompt_ids.size()) : -1;
  r.max_tokens = spec.max_tokens;
  return r;
}

}  // namespace

kvserve::v1::GenerateRequest BuildRequest(const RequestSpec& spec, const PhaseOptions& options) {
  kvserve::v1::GenerateRequest request;
  if (!spec.prompt_text.empty()) {
    request.set_text(spec.prompt_text);
  } else {
    request.mutable_token_ids()->mutable_ids()->Assign(spec.prompt_ids.begin(),
                                                       spec.prompt_ids.end());
  }
  request.mutable_sampling()->set_temperature(options.temperature);
  request.mutable_sampling()->set_seed(spec.sampling_seed);
  request.mutable_stopping()->set_max_tokens(static_cast<int32_t>(spec.max_tokens));
  request.mutable_stopping()->set_ignore_eos(options.ignore_eos);
  request.set_request_id(absl::StrCat(options.request_id_prefix, spec.index));
  return request;
}

Runner::Runner(const std::string& address, int num_channels) {
  for (int i = 0; i < std::max(num_channels, 1); ++i) {
    grpc::ChannelArguments args;
    // A local subchannel pool and a distinct argument make each channel its
    // own TCP connection instead of sharing one.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("kvserve.loadgen_channel", i);
    args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    stubs_.push_back(kvserve::v1::KvServe::NewStub(channel));
  }
}

grpc::Status Runner::GetModelInfo(double timeout_s, kvserve::v1::GetModelInfoResponse* info) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(
                           std::chrono::duration<double>(timeout_s)));
  // Wait for the connection (the server may still be coming up) until the deadline.
  context.set_wait_for_ready(true);
  return stubs_[0]->GetModelInfo(&context, kvserve::v1::GetModelInfoRequest(), info);
}

std::vector<RequestRecord> Runner::RunPhase(const std::vector<RequestSpec>& specs,
                                            const std::vector<double>& arrival_s,
                                            const PhaseOptions& options) {
  const int64_t n = static_cast<int64_t>(specs.size());
  auto phase = std::make_shared<PhaseState>();
  phase->results.resize(n);
  for (int64_t i = 0; i < n; ++i) phase->results[i] = RecordFor(specs[i]);  // unsent until it ends
  std::vector<std::unique_ptr<GenerateCall>> calls;  // calls[i] sends specs[i]
  calls.reserve(n);

  ProgressBar progress(options.progress, options.label, n);
  const auto t0 = Clock::now();
  const bool limited = options.max_duration_s > 0;
  const auto limit = t0 + Seconds(limited ? options.max_duration_s : 0);
  constexpr auto kTick = std::chrono::milliseconds(200);  // progress redraw period
  auto next_draw = t0;
  int64_t next = 0;  // specs[0, next) were started
  bool hit_limit = false;

  std::unique_lock<std::mutex> lock(phase->mu);
  for (;;) {
    const auto now = Clock::now();
    if (now >= next_draw) {
      progress.Update(phase->done, phase->in_flight, phase->errors, SecondsBetween(t0, now));
      next_draw = now + kTick;
    }
    if (limited && now >= limit) {
      hit_limit = true;
      break;
    }
    if (next == n && phase->in_flight == 0) break;  // all sent and done
    const bool slot_free = options.concurrency <= 0 || phase->in_flight < options.concurrency;
    // Open loop: a late dispatcher sends at once (it catches up, never skips).
    const auto due = next < n ? t0 + Seconds(arrival_s[next]) : now;
    if (next < n && slot_free && now >= due) {
      ++phase->in_flight;
      calls.push_back(std::make_unique<GenerateCall>(RecordFor(specs[next]), phase, t0));
      GenerateCall* call = calls.back().get();
      kvserve::v1::GenerateRequest request = BuildRequest(specs[next], options);
      auto* stub = stubs_[next % stubs_.size()].get();
      ++next;
      // Started outside the lock: the OnDone of a fast failure takes it.
      lock.unlock();
      call->Start(stub, std::move(request), options.request_timeout_s);
      lock.lock();
      continue;
    }
    auto wake = next_draw;
    if (next < n && slot_free) wake = std::min(wake, due);
    if (limited) wake = std::min(wake, limit);
    // OnDone wakes it early (a slot freed, or the last call ended).
    phase->cv.wait_until(lock, wake);
  }

  if (hit_limit) {
    // Duration limit: no new calls; cancel those in flight. Their OnDone
    // comes with CANCELLED (or their real status if they just ended).
    lock.unlock();
    for (auto& call : calls) call->Cancel();
    lock.lock();
  }
  const auto grace_end = Clock::now() + Seconds(kCancelGraceS);
  while (phase->in_flight > 0 && Clock::now() < grace_end) {
    phase->cv.wait_until(lock, std::min(grace_end, Clock::now() + kTick));
    progress.Update(phase->done, phase->in_flight, phase->errors, SecondsBetween(t0, Clock::now()));
  }
  progress.Update(phase->done, phase->in_flight, phase->errors, SecondsBetween(t0, Clock::now()));
  progress.Finish();
  std::vector<RequestRecord> results = phase->results;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i]->done()) continue;
    // Should not happen: gRPC promises OnDone after TryCancel. The call keeps
    // the phase state alive through its shared_ptr; it is leaked, not deleted.
    RequestRecord& r = results[i];
    r.sent = true;
    r.status_code = static_cast<int>(grpc::StatusCode::CANCELLED);
    r.status_message = "loadgen: the call did not end after cancellation";
    r.cancelled_by_limit = true;
    r.end_s = SecondsBetween(t0, Clock::now());
    (void)calls[i].release();
  }
  lock.unlock();
  return results;  // `calls` (all done) are deleted here
}

}  // namespace kvserve::loadgen
