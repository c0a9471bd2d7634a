// ResponsesCall: one POST /v1/responses in flight. Its body was translated
// onto a chat request (openai_responses.h); this call submits it (one
// choice) and turns the engine's outputs into a Responses API object, or its
// SSE events:
//
//   response.created, response.in_progress,
//   per message:  response.output_item.added, response.content_part.added,
//                 response.output_text.delta..., response.output_text.done,
//                 response.content_part.done, response.output_item.done
//   per function call (when the request has tools):
//                 response.output_item.added, response.function_call_arguments.delta,
//                 response.function_call_arguments.done, response.output_item.done
//   response.completed (or response.incomplete when max_output_tokens cut it),
//   or an "error" event when the generation failed after the stream began.
//
// Every event carries a sequence_number from 0. Threads and ownership are
// GenerationCall's (openai_generation.h): built and run on the connection's
// strand, outputs posted to it with a weak_ptr, a disconnect aborts the
// request, counted as a stream in ServingState.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/output_stream.h"
#include "server/http/http_channel.h"
#include "server/http/openai_protocol.h"
#include "server/http/response_items.h"
#include "server/serving_state.h"

namespace kvserve::server::http {

class ResponsesCall final : public Exchange, public std::enable_shared_from_this<ResponsesCall> {
 public:
  // Strand. Submits the request; if the engine refuses it, answers with the
  // error and returns nullptr. `echo`: ResponseEcho of the original body.
  static std::shared_ptr<ResponsesCall> Start(ServingState& state, const ModelContext& model,
                                              GenerationRequest request, Json echo,
                                              HttpChannel& channel);
  ResponsesCall(ServingState& state, const ModelContext& model, GenerationRequest request,
                Json echo, HttpChannel& channel);
  ~ResponsesCall() override;

  void OnDisconnect() override;

 private:
  void OnOutput(scheduler::RequestOutput&& out);
  void Finish(const scheduler::RequestOutput& out);
  void Fail(const absl::Status& status);
  void Send(Json event);  // stamps its sequence_number (0, 1, ...)
  // The response object: status in_progress / completed / incomplete.
  Json ResponseObject(std::string_view status) const;
  void StreamDelta(const ResponseItems::Delta& delta);

  ServingState& state_;
  const ModelContext& model_;
  const GenerationRequest request_;
  const Json echo_;
  HttpChannel& channel_;
  const std::string id_;
  const int64_t created_at_;
  ResponseItems items_;  // request_'s tool calling
  scheduler::RequestId engine_id_ = 0;
  bool submitted_ = false;
  bool finished_ = false;  // the engine's final output came (or the call failed)
  bool done_ = false;      // answered or the client left: later outputs are dropped
  std::string finish_reason_;
  scheduler::Usage usage_;
  int64_t sequence_number_ = 0;
};

}  // namespace kvserve::server::http
