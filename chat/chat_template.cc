#include "chat/chat_template.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "chat/jinja/filters.h"
#include "chat/jinja/template.h"

namespace kvserve::chat {

using jinja::Json;

struct ChatTemplate::Compiled {
  std::string source;
  jinja::Template tmpl;
  // tokenizer_config.json's {"name": "tool_use"} template, used when tools are given.
  std::optional<std::pair<std::string, jinja::Template>> tool_use;
  Json special_tokens = Json::object();
};

namespace {

// The special tokens transformers exposes to templates (special_tokens_map).
constexpr const char* kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                          "pad_token", "cls_token", "mask_token"};

// "line N: message" for the template's errors; a raise_exception() message as is.
absl::Status ToStatus(const jinja::Error& e, const std::string& where) {
  if (dynamic_cast<const jinja::RaisedError*>(&e) != nullptr) {
    return absl::InvalidArgumentError(e.message());
  }
  std::string msg = where;
  if (e.line() > 0) msg += " line " + std::to_string(e.line());
  return absl::InvalidArgumentError(msg + ": " + e.message());
}

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<Json> ReadJson(const std::filesystem::path& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  Json j = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(path.string() + ": invalid JSON");
  return j;
}

// A special token as tokenizer_config.json writes it: a string or an
// AddedToken object {"content": ..., "__type": "AddedToken", ...}.
std::optional<std::string> TokenText(const Json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) {
    return j["content"].get<std::string>();
  }
  return std::nullopt;
}

absl::StatusOr<jinja::Template> Compile(const std::string& source, const std::string& where) {
  try {
    return jinja::Template(source);
  } catch (const jinja::Error& e) {
    return ToStatus(e, where);
  }
}

// What transformers does to the conversation before rendering.
absl::StatusOr<Json> PrepareMessages(const Json& messages) {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages must be an array");
  if (messages.empty()) {
    return absl::InvalidArgumentError("cannot apply the chat template to an empty conversation");
  }
  Json out = Json::array();
  for (const Json& m : messages) {
    if (!m.is_object()) return absl::InvalidArgumentError("every message must be an object");
    Json msg = Json::object();
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it.value().is_null()) msg[it.key()] = it.value();  // null values are dropped
    }
    // {"thinking": r, **message, "reasoning_content": r} for the first
    // non-null of reasoning_content, thinking, reasoning.
    for (const char* field : {"reasoning_content", "thinking", "reasoning"}) {
      auto it = msg.find(field);
      if (it == msg.end()) continue;
      const Json reasoning = *it;
      Json aliased = Json::object();
      aliased["thinking"] = reasoning;
      for (auto kv = msg.begin(); kv != msg.end(); ++kv) aliased[kv.key()] = kv.value();
      aliased["reasoning_content"] = reasoning;
      msg = std::move(aliased);
      break;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// continue_final_message, as transformers' render_jinja_template does it: the
// final message's content (its last text part, for a list) gets this tag
// appended before rendering, and the rendered text is cut where the tag
// starts, so the template's end-of-turn suffix after the content is dropped.
constexpr std::string_view kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG ";

// Tags the final message in place; returns its text before tagging.
absl::StatusOr<std::string> TagFinalMessage(const std::string& source, Json& messages) {
  Json& last = messages.back();
  const auto content = last.find("content");
  if (content == last.end()) {
    return absl::InvalidArgumentError(
        "continue_final_message is set but the final message has no \"content\" to continue");
  }
  if (source.find("content") == std::string::npos) {
    return absl::InvalidArgumentError(
        "continue_final_message is set but the chat template never reads \"content\"");
  }
  if (content->is_string()) {
    std::string text = content->get<std::string>();
    *content = text + std::string(kContinueTag);
    return text;
  }
  if (content->is_array()) {
    for (auto part = content->rbegin(); part != content->rend(); ++part) {
      const auto text = part->is_object() ? part->find("text") : part->end();
      if (part->is_object() && text != part->end() && text->is_string()) {
        std::string original = text->get<std::string>();
        *text = original + std::string(kContinueTag);
        return original;
      }
    }
  }
  return absl::InvalidArgumentError(
      "continue_final_message is set but the final message has no text to continue");
}

// The rendered text up to the tag (and, where the template trimmed the
// space the tag carries, without the whitespace before it).
absl::StatusOr<std::string> CutAtTag(const std::string& rendered, const std::string& final_text) {
  const std::string bare_tag = jinja::Strip(std::string(kContinueTag), std::nullopt, true, true);
  const std::string stripped = jinja::Strip(final_text, std::nullopt, true, true);
  const size_t tag = rendered.rfind(bare_tag);
  if (tag == std::string::npos || rendered.find(stripped) == std::string::npos) {
    return absl::InvalidArgumentError(
        "continue_final_message is set but the final message does not appear in the chat after "
        "applying the chat template (the template deletes parts of it)");
  }
  if (rendered.compare(tag, kContinueTag.size(), kContinueTag) == 0) return rendered.substr(0, tag);
  return jinja::Strip(rendered.substr(0, tag), std::nullopt, false, true);
}

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const Compiled> compiled)
    : compiled_(std::move(compiled)) {}

const std::string& ChatTemplate::source() const { return compiled_->source; }
const nlohmann::ordered_json& ChatTemplate::special_tokens() const {
  return compiled_->special_tokens;
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromSource(const std::string& source,
                                                      nlohmann::json special_tokens) {
  if (!special_tokens.is_null() && !special_tokens.is_object()) {
    return absl::InvalidArgumentError("special_tokens must be an object");
  }
  absl::StatusOr<jinja::Template> tmpl = Compile(source, "chat template");
  if (!tmpl.ok()) return tmpl.status();
  auto compiled =
      std::make_shared<Compiled>(Compiled{source, std::move(*tmpl), std::nullopt, Json::object()});
  if (special_tokens.is_object()) compiled->special_tokens = Json(special_tokens);
  return ChatTemplate(std::move(compiled));
}

absl::StatusOr<std::optional<ChatTemplate>> ChatTemplate::FromCheckpoint(
    const std::filesystem::path& model_dir) {
  const std::filesystem::path config_path = model_dir / "tokenizer_config.json";
  Json config = Json::object();
  if (std::filesystem::exists(config_path)) {
    absl::StatusOr<Json> j = ReadJson(config_path);
    if (!j.ok()) return j.status();
    if (!j->is_object())
      return absl::InvalidArgumentError(config_path.string() + ": not a JSON object");
    config = std::move(*j);
  }

  std::string source, where;
  std::optional<std::string> tool_use_source;
  const std::filesystem::path jinja_path = model_dir / "chat_template.jinja";
  const std::filesystem::path json_path = model_dir / "chat_template.json";
  if (std::filesystem::exists(jinja_path)) {
    absl::StatusOr<std::string> text = ReadFile(jinja_path);
    if (!text.ok()) return text.status();
    source = std::move(*text);
    where = jinja_path.string();
  } else if (std::filesystem::exists(json_path)) {
    absl::StatusOr<Json> j = ReadJson(json_path);
    if (!j.ok()) return j.status();
    if (!j->is_object() || !j->contains("chat_template") || !(*j)["chat_template"].is_string()) {
      return absl::InvalidArgumentError(json_path.string() +
                                        ": expected {\"chat_template\": \"...\"}");
    }
    source = (*j)["chat_template"].get<std::string>();
    where = json_path.string();
  } else if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    const Json& t = config["chat_template"];
    where = config_path.string();
    if (t.is_string()) {
      source = t.get<std::string>();
    } else if (t.is_array()) {
      std::optional<std::string> def;
      for (const Json& named : t) {
        if (!named.is_object() || !named.contains("name") || !named.contains("template") ||
            !named["name"].is_string() || !named["template"].is_string()) {
          return absl::InvalidArgumentError(
              where + ": chat_template entries must be {\"name\", \"template\"}");
        }
        if (named["name"] == "default") def = named["template"].get<std::string>();
        if (named["name"] == "tool_use") tool_use_source = named["template"].get<std::string>();
      }
      if (!def) return absl::InvalidArgumentError(where + ": no chat_template named \"default\"");
      source = std::move(*def);
    } else {
      return absl::InvalidArgumentError(where + ": chat_template must be a string or a list");
    }
  } else {
    return std::optional<ChatTemplate>();
  }

  // Special tokens: tokenizer_config.json, then the legacy special_tokens_map.json.
  Json special = Json::object();
  Json legacy = Json::object();
  const std::filesystem::path map_path = model_dir / "special_tokens_map.json";
  if (std::filesystem::exists(map_path)) {
    absl::StatusOr<Json> j = ReadJson(map_path);
    if (!j.ok()) return j.status();
    if (j->is_object()) legacy = std::move(*j);
  }
  for (const char* name : kSpecialTokens) {
    std::optional<std::string> text;
    if (config.contains(name)) text = TokenText(config[name]);
    if (!text && legacy.contains(name)) text = TokenText(legacy[name]);
    if (text) special[name] = *text;
  }

  absl::StatusOr<jinja::Template> tmpl = Compile(source, where);
  if (!tmpl.ok()) return tmpl.status();
  auto compiled =
      std::make_shared<Compiled>(Compiled{source, std::move(*tmpl), std::nullopt, special});
  if (tool_use_source) {
    absl::StatusOr<jinja::Template> tool = Compile(*tool_use_source, where + " (tool_use)");
    if (!tool.ok()) return tool.status();
    compiled->tool_use.emplace(*tool_use_source, std::move(*tool));
  }
  return std::optional<ChatTemplate>(ChatTemplate(std::move(compiled)));
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatTemplateInputs& inputs) const {
  OrderedChatTemplateInputs ordered;
  ordered.messages = Json(inputs.messages);
  ordered.tools = Json(inputs.tools);
  ordered.add_generation_prompt = inputs.add_generation_prompt;
  ordered.continue_final_message = inputs.continue_final_message;
  ordered.extra_context = Json(inputs.extra_context);
  return Render(ordered);
}

absl::StatusOr<std::string> ChatTemplate::Render(const OrderedChatTemplateInputs& inputs) const {
  absl::StatusOr<Json> messages = PrepareMessages(inputs.messages);
  if (!messages.ok()) return messages.status();
  if (inputs.continue_final_message && inputs.add_generation_prompt) {
    return absl::InvalidArgumentError(
        "continue_final_message and add_generation_prompt are not compatible: the first continues "
        "the final message, the second opens a new one");
  }
  if (!inputs.tools.is_null() && !inputs.tools.is_array()) {
    return absl::InvalidArgumentError("tools must be an array");
  }
  if (!inputs.extra_context.is_null() && !inputs.extra_context.is_object()) {
    return absl::InvalidArgumentError("chat template kwargs must be an object");
  }
  Json context = compiled_->special_tokens;
  if (inputs.extra_context.is_object()) {
    for (auto it = inputs.extra_context.begin(); it != inputs.extra_context.end(); ++it) {
      const std::string& key = it.key();
      if (key == "messages" || key == "tools" || key == "documents" ||
          key == "add_generation_prompt") {
        return absl::InvalidArgumentError("chat template kwargs cannot set '" + key + "'");
      }
      context[key] = it.value();
    }
  }
  context["messages"] = std::move(*messages);
  context["tools"] = inputs.tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = inputs.add_generation_prompt;
  const bool use_tool_template = compiled_->tool_use.has_value() && !inputs.tools.is_null();
  const jinja::Template& tmpl = use_tool_template ? compiled_->tool_use->second : compiled_->tmpl;
  std::string final_text;
  if (inputs.continue_final_message) {
    absl::StatusOr<std::string> text = TagFinalMessage(
        use_tool_template ? compiled_->tool_use->first : compiled_->source, context["messages"]);
    if (!text.ok()) return text.status();
    final_text = *std::move(text);
  }
  std::string rendered;
  try {
    rendered = tmpl.Render(std::move(context));
  } catch (const jinja::Error& e) {
    return ToStatus(e, "chat template");
  }
  if (!inputs.continue_final_message) return rendered;
  return CutAtTag(rendered, final_text);
}

}  // namespace kvserve::chat
