#include "server/http/response_items.h"

#include <utility>

#include "server/http/openai_generation.h"

namespace kvserve::server::http {
namespace {

Json TextPart(std::string text) {
  return Json{{"type", "output_text"}, {"text", std::move(text)}, {"annotations", Json::array()}};
}

}  // namespace

ResponseItems::ResponseItems(const std::optional<ToolCalling>& tool_calling) {
  if (!tool_calling.has_value()) return;
  parser_.emplace(tool_calling->format);
  max_calls_ = tool_calling->max_calls;
}

ResponseItems::Delta ResponseItems::Feed(std::string_view text) {
  Delta out;
  if (!parser_) {
    AddContent(text, &out);
    return out;
  }
  tool_calling::ToolCallDelta parsed = parser_->Feed(text);
  AddContent(parsed.content, &out);
  for (tool_calling::ToolCall& call : parsed.calls) AddCall(std::move(call), &out);
  return out;
}

void ResponseItems::AddContent(std::string_view text, Delta* out) {
  if (text.empty()) return;
  if (message_index_ < 0) OpenMessage(out);
  message_text_ += text;
  const Json& item = output_[static_cast<size_t>(message_index_)];
  out->events.push_back(Json{{"type", "response.output_text.delta"},
                             {"item_id", item["id"]},
                             {"output_index", message_index_},
                             {"content_index", 0},
                             {"delta", std::string(text)},
                             {"logprobs", Json::array()}});
}

void ResponseItems::AddCall(tool_calling::ToolCall call, Delta* out) {
  if (max_calls_ > 0 && num_calls_ >= max_calls_) return;  // parallel_tool_calls false
  ++num_calls_;
  if (message_index_ >= 0) CloseMessage("completed", out);  // the content before the call
  const auto index = static_cast<int32_t>(output_.size());
  Json item =
      Json{{"type", "function_call"}, {"id", RandomId("fc_")}, {"call_id", RandomToolCallId()},
           {"name", call.name},       {"arguments", ""},       {"status", "in_progress"}};
  out->events.push_back(
      Json{{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
  out->events.push_back(Json{{"type", "response.function_call_arguments.delta"},
                             {"item_id", item["id"]},
                             {"output_index", index},
                             {"delta", call.arguments}});
  out->events.push_back(Json{{"type", "response.function_call_arguments.done"},
                             {"item_id", item["id"]},
                             {"output_index", index},
                             {"name", call.name},
                             {"arguments", call.arguments}});
  item["arguments"] = std::move(call.arguments);
  item["status"] = "completed";
  out->events.push_back(
      Json{{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
}

ResponseItems::Delta ResponseItems::Finish(std::string_view status) {
  Delta out;
  if (parser_) {
    tool_calling::ToolCallDelta parsed = parser_->Finish();
    AddContent(parsed.content, &out);
    for (tool_calling::ToolCall& call : parsed.calls) AddCall(std::move(call), &out);
  }
  if (output_.empty()) OpenMessage(&out);  // nothing written: an empty message
  if (message_index_ >= 0) CloseMessage(status, &out);
  return out;
}

void ResponseItems::OpenMessage(Delta* out) {
  message_index_ = static_cast<int>(output_.size());
  message_text_.clear();
  output_.push_back(Json{{"type", "message"},
                         {"id", RandomId("msg_")},
                         {"status", "in_progress"},
                         {"role", "assistant"},
                         {"content", Json::array()}});
  const Json& item = output_.back();
  out->events.push_back(Json{
      {"type", "response.output_item.added"}, {"output_index", message_index_}, {"item", item}});
  out->events.push_back(Json{{"type", "response.content_part.added"},
                             {"item_id", item["id"]},
                             {"output_index", message_index_},
                             {"content_index", 0},
                             {"part", TextPart("")}});
}

void ResponseItems::CloseMessage(std::string_view status, Delta* out) {
  Json& item = output_[static_cast<size_t>(message_index_)];
  item["content"] = Json::array({TextPart(message_text_)});
  item["status"] = std::string(status);
  out->events.push_back(Json{{"type", "response.output_text.done"},
                             {"item_id", item["id"]},
                             {"output_index", message_index_},
                             {"content_index", 0},
                             {"text", message_text_},
                             {"logprobs", Json::array()}});
  out->events.push_back(Json{{"type", "response.content_part.done"},
                             {"item_id", item["id"]},
                             {"output_index", message_index_},
                             {"content_index", 0},
                             {"part", TextPart(message_text_)}});
  out->events.push_back(Json{
      {"type", "response.output_item.done"}, {"output_index", message_index_}, {"item", item}});
  message_index_ = -1;
}

}  // namespace kvserve::server::http
