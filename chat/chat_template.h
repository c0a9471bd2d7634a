// The checkpoint's chat template, rendered the way transformers'
// tokenizer.apply_chat_template(..., tokenize=False) renders it.
//
// Contract shared by the OpenAI chat endpoint (server/) and the Jinja engine
// (chat/jinja/): the endpoint builds ChatTemplateInputs from the request and
// tokenizes the rendered text WITHOUT adding special tokens (the template
// writes bos_token itself), as transformers does.
#ifndef KVSERVE_CHAT_CHAT_TEMPLATE_H_
#define KVSERVE_CHAT_CHAT_TEMPLATE_H_

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace kvserve::chat {

// What the template sees, as transformers passes it.
struct ChatTemplateInputs {
  // Array of message objects ({"role", "content"} plus whatever the client
  // sent: "name", "tool_calls", ...). "content" is a string or an array of
  // parts ({"type": "text", "text": ...}); passed to the template as given.
  nlohmann::json messages = nlohmann::json::array();
  nlohmann::json tools;  // null (absent) or an array of tool definitions
  bool add_generation_prompt = true;
  // Leave the final message open (transformers' continue_final_message):
  // the text is cut where the final message's content ends, dropping the
  // end-of-turn the template writes after it. Not with add_generation_prompt.
  bool continue_final_message = false;
  // Extra top-level variables (chat_template_kwargs); an object or null.
  nlohmann::json extra_context;
};

// The same inputs with the client's key order kept: tojson writes object keys
// in this order, as Python's dicts do (nlohmann::json sorts them). A server
// that parses the request with nlohmann::ordered_json renders exactly what
// transformers renders for the same request.
struct OrderedChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  nlohmann::ordered_json extra_context;
};

class ChatTemplate {
 public:
  // Finds the checkpoint's template the way transformers does:
  // chat_template.jinja, then chat_template.json ({"chat_template": ...}),
  // then tokenizer_config.json's "chat_template" (a string, or a list of
  // {"name", "template"} of which "default" is used, or "tool_use" when the
  // request has tools and the list names one). bos_token / eos_token
  // (and the other special tokens a template may name) come from
  // tokenizer_config.json (a string or an AddedToken object's "content").
  // Returns nullopt when the checkpoint has no template. Errors name the file,
  // and for a template the engine cannot parse, the line.
  static absl::StatusOr<std::optional<ChatTemplate>> FromCheckpoint(
      const std::filesystem::path& model_dir);

  // A template given as text; special_tokens is an object such as
  // {"bos_token": "<s>", "eos_token": "</s>"} exposed to the template.
  static absl::StatusOr<ChatTemplate> FromSource(const std::string& source,
                                                 nlohmann::json special_tokens);

  // Renders the conversation. A raise_exception() in the template, or an
  // unsupported construct met at render time, is InvalidArgument with the
  // template's message / line (the endpoint answers 400 with it):
  // raise_exception's message exactly as the template wrote it, any other
  // error as "chat template line N: <what jinja2 would say>".
  // As transformers' apply_chat_template: message keys whose value is null
  // are dropped, reasoning_content / thinking / reasoning are aliased, an
  // empty conversation is an error, and the template sees messages, tools,
  // documents (none), add_generation_prompt, the special tokens and
  // extra_context (which overrides the special tokens).
  absl::StatusOr<std::string> Render(const ChatTemplateInputs& inputs) const;
  absl::StatusOr<std::string> Render(const OrderedChatTemplateInputs& inputs) const;

  const std::string& source() const;
  // The special tokens the template sees ({"bos_token": ..., ...}).
  const nlohmann::ordered_json& special_tokens() const;

 private:
  struct Compiled;
  explicit ChatTemplate(std::shared_ptr<const Compiled> compiled);
  std::shared_ptr<const Compiled> compiled_;  // immutable, shared by copies
};

}  // namespace kvserve::chat

#endif  // KVSERVE_CHAT_CHAT_TEMPLATE_H_
