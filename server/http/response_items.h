// ResponseItems: the "output" of one Responses API response, built as the
// model's text arrives, and the streaming events each piece of it gives.
//
// Items, in text order: a "message" item holding one output_text part (the
// content), and "function_call" items when the request's tools are parsed
// out of the text. A response always has at least one item (an empty
// message when the model wrote nothing).
//
// Events come without "sequence_number" (the call stamps it); item ids are
// "msg_<hex>" / "fc_<hex>", call ids "call_<hex>".
//
// Not thread-safe: the call's strand owns it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/http/openai_protocol.h"

namespace kvserve::server::http {

class ResponseItems {
 public:
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

 private:
  void OpenMessage(Delta* out);
  void CloseMessage(std::string_view status, Delta* out);

  Json output_ = Json::array();
  int message_index_ = -1;  // the open message's index in output_, -1 when none is open
  std::string message_text_;
};

}  // namespace kvserve::server::http
