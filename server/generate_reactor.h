// GenerateReactor: one server-streaming Generate call (gRPC callback API).
//
// Threads and ownership:
// - gRPC owns the reactor from the Generate handler until OnDone, which
//   deletes it. Reactions (OnWriteDone, OnCancel, OnDone) run on gRPC's
//   callback threads.
// - The engine loop delivers outputs through the request's OutputCallback,
//   which holds a shared_ptr to the Stream (below), not to the reactor: the
//   engine may deliver the final message after the reactor is gone (client
//   cancelled), and the Stream simply drops it then.
// - Never blocking: the callback appends to the Stream's queue under a short
//   mutex and, if no write is in flight, starts one. At most one write is in
//   flight; OnWriteDone sends everything queued meanwhile as ONE merged
//   message (a slow client costs the engine nothing and gets fewer, larger
//   messages).
// - Finish is called exactly once: after the write carrying the final output,
//   or on cancel/failed write once no write is in flight, or at once for a
//   request refused before it reached the engine.
// - OnCancel (client cancel, deadline, server shutdown) aborts the request
//   in the engine, which frees its KV blocks.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "grpcpp/grpcpp.h"
#include "kvserve/v1/kvserve.grpc.pb.h"
#include "scheduler/output_stream.h"
#include "server/serving_state.h"

namespace kvserve::server {

class GenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  GenerateReactor(ServingState& state, grpc::CallbackServerContext* context,
                  const v1::GenerateRequest& request);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // Shared between the reactor and the engine's output callback.
  struct Stream {
    std::mutex mu;
    GenerateReactor* reactor = nullptr;  // null once OnDone ran
    std::deque<scheduler::RequestOutput> pending;
    bool writing = false;    // a StartWrite is in flight
    bool finishing = false;  // Finish was (or is being) called
    bool cancelled = false;  // OnCancel ran or a write failed
    bool final_queued = false;
  };

  // Engine loop thread.
  static void Deliver(const std::shared_ptr<Stream>& stream, ServingState& state,
                      const std::string& request_id, scheduler::RequestOutput&& output);
  // With stream->mu held and no write in flight: decides the next action.
  // Returns true if the caller must StartWrite(&response_) after unlocking;
  // sets *finish if it must call Finish(finish_status_) instead.
  bool NextActionLocked(bool* finish);
  void Act(std::unique_lock<std::mutex>& lock);
  // Validates and submits the request, or refuses it (Finish at once).
  void Begin(const v1::GenerateRequest& request);
  void Refuse(const grpc::Status& status);
  // True for a cancel at (or just before) the call's deadline.
  bool CancelledByDeadline() const;

  ServingState& state_;
  grpc::CallbackServerContext* const context_;
  std::shared_ptr<Stream> stream_;
  std::string request_id_;
  scheduler::RequestId engine_id_ = 0;
  bool submitted_ = false;

  // Owned by whoever set stream_->writing (one writer at a time).
  v1::GenerateResponse response_;
  grpc::Status finish_status_;
  bool final_written_ = false;
};

}  // namespace kvserve::server
