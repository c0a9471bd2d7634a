// GenerationCall: one /v1/completions or /v1/chat/completions request in
// flight: its choices submitted to the engine, their outputs turned into one
// JSON response or an SSE stream.
//
// Threads and ownership:
// - Created and run on the connection's strand. The connection holds the
//   only strong reference (http_channel.h: Exchange); `channel_` is valid for
//   the call's whole life.
// - The engine delivers outputs on its loop thread through each choice's
//   OutputCallback. The callback records metrics, then posts the output to
//   the strand with a weak_ptr to the call: it never blocks, never touches
//   the socket, and an output for a call that is gone is dropped.
// - A client that disconnects (OnDisconnect) or an error in one choice
//   aborts every unfinished choice in the engine (EngineLoop::Abort), which
//   frees their KV blocks.
// - Counted as a stream in ServingState from Start to destruction, so a
//   drain waits for it like for a gRPC stream.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "scheduler/output_stream.h"
#include "server/http/http_channel.h"
#include "server/http/openai_format.h"
#include "server/http/openai_protocol.h"
#include "server/serving_state.h"
#include "server/tool_calling/tool_call_parser.h"

namespace kvserve::server::http {

// prefix followed by 32 random hex digits (response and request ids).
std::string RandomId(std::string_view prefix);

class GenerationCall final : public Exchange, public std::enable_shared_from_this<GenerationCall> {
 public:
  // Strand. Submits every choice. If the engine refuses one (queue full,
  // stopping, invalid), answers with that error, aborts the choices already
  // submitted and returns nullptr.
  static std::shared_ptr<GenerationCall> Start(ServingState& state, const ModelContext& model,
                                               GenerationRequest request, HttpChannel& channel);
  GenerationCall(ServingState& state, const ModelContext& model, GenerationRequest request,
                 HttpChannel& channel);
  ~GenerationCall() override;

  void OnDisconnect() override;

 private:
  struct Choice {
    scheduler::RequestId engine_id = 0;
    bool submitted = false;
    bool finished = false;
    std::string text;         // non-streaming: the whole text so far
    Json logprobs;            // non-streaming: merged logprobs (null when none)
    int64_t text_offset = 0;  // completions logprobs: code points emitted so far
    bool got_output = false;  // its first output (which carries the prompt's logprobs) came
    Json prompt_logprobs;     // non-streaming: vLLM's prompt_logprobs (null when not asked)
    int32_t completion_tokens = 0;
    scheduler::Usage usage;  // from the final output
    std::string finish_reason;
    // Streaming with tool calling: the choice's parser, and calls sent so far.
    std::optional<tool_calling::ToolCallParser> tool_parser;
    int32_t tool_calls_sent = 0;
  };

  void OnOutput(int32_t choice, scheduler::RequestOutput&& out);
  void StreamChunk(int32_t choice, const scheduler::RequestOutput& out);
  // The first output of a choice: its prompt's logprobs (echo, prompt_logprobs).
  void OnPromptScored(int32_t choice, const scheduler::RequestOutput& out);
  // Streaming with tool calling: the deltas (content, then each new call as
  // an opening chunk and an arguments chunk) of one output.
  std::vector<Json> ToolCallDeltas(int32_t choice, const scheduler::RequestOutput& out);
  // Non-streaming: the message of a whole text, and its finish reason.
  Json ToolCallMessage(const Choice& choice, std::string* finish_reason) const;
  void SendChunk(Json choices, std::optional<Json> usage);
  void Complete();                        // every choice finished normally
  void Fail(const absl::Status& status);  // answers with the error; aborts the rest
  void AbortUnfinished();
  Json TotalUsage() const;
  Json ChoiceUsage(int32_t choice) const;
  Json Response() const;  // the non-streaming body

  ServingState& state_;
  const ModelContext& model_;
  const GenerationRequest request_;
  HttpChannel& channel_;
  const bool chat_;
  ResponseMeta meta_;
  std::vector<Choice> choices_;
  int32_t num_finished_ = 0;
  bool done_ = false;  // answered (or the client left): later outputs are dropped
};

}  // namespace kvserve::server::http
