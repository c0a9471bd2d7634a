// kvserve_chat_template_driver: lets tests/oracle/test_chat_template.py render
// one chat template over many conversations in one process.
//
// stdin, one JSON object:
//   {"template": "<jinja source>"           // or "model_dir": "<checkpoint dir>"
//    "special_tokens": {"bos_token": ...},  // with "template"
//    "cases": [{"messages": [...], "tools": [...] | null,
//               "add_generation_prompt": bool, "continue_final_message": bool (default
//               false), "extra_context": {...} | null}, ...]}
// stdout, one JSON object:
//   {"results": [{"text": "..."} | {"error": "<status message>"}, ...]}
// A template that fails to load prints {"error": "<status>"} and exits 2.
// Key order is kept (ordered_json), as Python's dicts keep it.
#include <iostream>
#include <iterator>
#include <string>

#include "chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace {

using kvserve::chat::ChatTemplate;
using nlohmann::ordered_json;

int Run() {
  const std::string input((std::istreambuf_iterator<char>(std::cin)),
                          std::istreambuf_iterator<char>());
  const ordered_json request = ordered_json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object() || !request.contains("cases") || !request["cases"].is_array()) {
    std::cout << ordered_json{{"error", "request must be an object with \"cases\""}}.dump() << "\n";
    return 2;
  }
  absl::StatusOr<ChatTemplate> tmpl = absl::InvalidArgumentError("no template");
  if (request.contains("model_dir")) {
    auto loaded = ChatTemplate::FromCheckpoint(request["model_dir"].get<std::string>());
    if (!loaded.ok()) {
      tmpl = loaded.status();
    } else if (!loaded->has_value()) {
      tmpl = absl::NotFoundError("the checkpoint has no chat template");
    } else {
      tmpl = std::move(**loaded);
    }
  } else {
    const nlohmann::json special =
        nlohmann::json::parse(request.value("special_tokens", ordered_json::object()).dump());
    tmpl = ChatTemplate::FromSource(request.value("template", ""), special);
  }
  if (!tmpl.ok()) {
    std::cout << ordered_json{{"error", tmpl.status().ToString()}}.dump() << "\n";
    return 2;
  }
  ordered_json results = ordered_json::array();
  for (const ordered_json& c : request["cases"]) {
    kvserve::chat::OrderedChatTemplateInputs in;
    in.messages = c.value("messages", ordered_json::array());
    in.tools = c.value("tools", ordered_json());
    in.add_generation_prompt = c.value("add_generation_prompt", false);
    in.continue_final_message = c.value("continue_final_message", false);
    in.extra_context = c.value("extra_context", ordered_json());
    const absl::StatusOr<std::string> text = tmpl->Render(in);
    if (text.ok()) {
      results.push_back({{"text", *text}});
    } else {
      results.push_back({{"error", std::string(text.status().message())}});
    }
  }
  std::cout << ordered_json{{"results", results}}.dump(-1, ' ', false,
                                                       ordered_json::error_handler_t::replace)
            << "\n";
  return 0;
}

}  // namespace

int main() { return Run(); }
