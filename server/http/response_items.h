// ResponseItems: the "output" of one Responses API response, built as the
// model's text arrives, and the streaming events each piece of it gives.
//
// Items, in text order: a "message" item holding one output_text part (the
// content), and "function_call" items when the request's tools are parsed
// out of the text. A response always has at least one item (an empty
// message when the model wrote nothing).
//
// Events come without "sequence_number" (the call stamps it); item ids are
// "msg_<hex>" / "fc_<hex>", call ids those of chat (RandomToolCallId).
//
// Not thread-safe: the call's strand owns it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/openai_protocol.h"
#include "server/http/openai_tools.h"
#include "server/tool_calling/tool_call_parser.h"

namespace kvserve::server::http {

class ResponseItems {
 public:
  // tool_calling: the request's (ParseToolCalling); nullopt: the text is all content.
  explicit ResponseItems(const std::optional<ToolCalling>& tool_calling);

  struct Delta {
    std::vector<Json> events;  // in order
  };

  // More generated text.
  Delta Feed(std::string_view text);
  // After the last text: closes the open items. `status` is the items'
  // final status ("completed", or "incomplete" when the length cut it).
  Delta Finish(std::string_view status);

  // The "output" array: every item as it stands.
  const Json& output() const { return output_; }
  // Some tool-call text did not parse and became content.
  bool malformed() const { return parser_.has_value() && parser_->malformed(); }

 private:
  void AddContent(std::string_view text, Delta* out);
  void AddCall(tool_calling::ToolCall call, Delta* out);
  void OpenMessage(Delta* out);
  void CloseMessage(std::string_view status, Delta* out);

  std::optional<tool_calling::ToolCallParser> parser_;
  int32_t max_calls_ = 0;  // 0: any number (parallel_tool_calls false: 1)
  int32_t num_calls_ = 0;

  Json output_ = Json::array();
  int message_index_ = -1;  // the open message's index in output_, -1 when none is open
  std::string message_text_;
};

}  // namespace kvserve::server::http
