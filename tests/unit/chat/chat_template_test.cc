// ChatTemplate: where the template and special tokens come from, and what
// Render passes to the template (as transformers' apply_chat_template).
#include "chat/chat_template.h"

#include <unistd.h>

#include <fstream>

#include "gtest/gtest.h"

namespace kvserve::chat {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "kvserve_chat_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  fs::path path_;
};

const char* kEcho =
    "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}|{% endfor %}"
    "{% if add_generation_prompt %}A:{% endif %}{{ eos_token }}";

ChatTemplateInputs Conversation(bool add_generation_prompt) {
  ChatTemplateInputs in;
  in.messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  in.add_generation_prompt = add_generation_prompt;
  return in;
}

TEST(ChatTemplate, FromSourceRendersWithSpecialTokens) {
  auto t = ChatTemplate::FromSource(kEcho, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Render(Conversation(true)), "<s>user:hi|A:</s>");
  EXPECT_EQ(*t->Render(Conversation(false)), "<s>user:hi|</s>");
  EXPECT_EQ(t->source(), kEcho);
  const ChatTemplate copy = *t;  // copies share the compiled template
  EXPECT_EQ(*copy.Render(Conversation(false)), "<s>user:hi|</s>");
}

TEST(ChatTemplate, RenderPassesWhatTransformersPasses) {
  auto t = ChatTemplate::FromSource(
      "{{ tools is none }} {{ documents is none }} {{ x }} {{ bos_token }} "
      "{% for m in messages %}{{ m }}{% endfor %}",
      {{"bos_token", "<s>"}});
  ASSERT_TRUE(t.ok()) << t.status();
  ChatTemplateInputs in;
  // Null values are dropped; reasoning is aliased to thinking and reasoning_content.
  in.messages = json::array(
      {{{"role", "assistant"}, {"content", "c"}, {"tool_calls", nullptr}, {"reasoning", "r"}}});
  in.extra_context = {{"x", 5}, {"bos_token", "<override>"}};
  EXPECT_EQ(*t->Render(in),
            "True True 5 <override> {'thinking': 'r', 'content': 'c', 'reasoning': 'r', 'role': "
            "'assistant', "
            "'reasoning_content': 'r'}");
}

TEST(ChatTemplate, OrderedInputsKeepKeyOrderForToJson) {
  auto t = ChatTemplate::FromSource("{{ tools|tojson }}", json::object());
  ASSERT_TRUE(t.ok());
  OrderedChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])");
  in.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_EQ(*t->Render(in), R"([{"type": "function", "function": {"name": "f"}}])");
}

TEST(ChatTemplate, ContinueFinalMessageCutsWhereTheContentEnds) {
  const std::string chatml =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  auto t = ChatTemplate::FromSource(chatml, json::object());
  ASSERT_TRUE(t.ok()) << t.status();
  ChatTemplateInputs in;
  in.messages = json::array({{{"role", "user"}, {"content", "Hi"}},
                             {{"role", "assistant"}, {"content", "Hello, I am "}}});
  in.add_generation_prompt = false;
  in.continue_final_message = true;
  auto text = t->Render(in);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello, I am ");
  // Content parts: the last text part is the one continued.
  in.messages[1]["content"] =
      json::array({{{"type", "text"}, {"text", "A"}}, {{"type", "text"}, {"text", "B"}}});
  auto parts = ChatTemplate::FromSource(
      "{% for m in messages %}{% for p in m.content if m.content is not string %}[{{ p.text }}]"
      "{% endfor %}{% if m.content is string %}{{ m.content }}{% endif %}|{% endfor %}",
      json::object());
  ASSERT_TRUE(parts.ok()) << parts.status();
  text = parts->Render(in);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "Hi|[A][B");
  // A template that trims the content loses the tag's space: the text
  // before the tag is right-stripped.
  auto trims = ChatTemplate::FromSource(
      "{% for m in messages %}{{ m.content | trim }}<end>{% endfor %}", json::object());
  ASSERT_TRUE(trims.ok());
  in.messages[1]["content"] = "Hello, I am ";
  text = trims->Render(in);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "Hi<end>Hello, I am");
  // Errors, as transformers raises them.
  in.add_generation_prompt = true;
  EXPECT_EQ(t->Render(in).status().code(), absl::StatusCode::kInvalidArgument);
  in.add_generation_prompt = false;
  in.messages[1].erase("content");
  EXPECT_EQ(t->Render(in).status().code(), absl::StatusCode::kInvalidArgument);
  in.messages[1]["content"] = "dropped";
  auto drops = ChatTemplate::FromSource("{% for m in messages %}{{ m.role }}{% endfor %}content",
                                        json::object());
  ASSERT_TRUE(drops.ok());
  EXPECT_EQ(drops->Render(in).status().code(), absl::StatusCode::kInvalidArgument);
  auto never = ChatTemplate::FromSource("{{ messages | length }}", json::object());
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(never->Render(in).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplate, ErrorsAreInvalidArgument) {
  auto t = ChatTemplate::FromSource(
      "a\n{% if messages|length > 1 %}{{ raise_exception('Only one!') }}{% endif %}"
      "\n{{ messages[0].content.x.y }}",
      json::object());
  ASSERT_TRUE(t.ok());
  ChatTemplateInputs two = Conversation(false);
  two.messages.push_back({{"role", "user"}, {"content", "again"}});
  auto raised = t->Render(two);
  EXPECT_EQ(raised.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(raised.status().message(), "Only one!");
  auto undefined = t->Render(Conversation(false));
  EXPECT_EQ(undefined.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(undefined.status().message(),
            "chat template line 3: 'str object' has no attribute 'x'");
  ChatTemplateInputs empty;
  EXPECT_EQ(t->Render(empty).status().code(), absl::StatusCode::kInvalidArgument);

  auto bad = ChatTemplate::FromSource("ok\n{% for x in y %}\n{{ x }", json::object());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "chat template line 3: unterminated {{ tag");
}

TEST(ChatTemplate, FromCheckpointFindsNoTemplate) {
  TempDir dir;
  dir.Write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  auto t = ChatTemplate::FromCheckpoint(dir.path());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->has_value());
}

TEST(ChatTemplate, FromCheckpointPrefersJinjaFileThenJsonThenConfig) {
  TempDir dir;
  dir.Write("tokenizer_config.json",
            R"({"chat_template": "config", "eos_token": "</s>",
                "bos_token": {"__type": "AddedToken", "content": "<s>", "special": true}})");
  auto from_config = ChatTemplate::FromCheckpoint(dir.path());
  ASSERT_TRUE(from_config.ok() && from_config->has_value());
  EXPECT_EQ((*from_config)->source(), "config");
  EXPECT_EQ((*from_config)->special_tokens(),
            nlohmann::ordered_json::parse(R"({"bos_token": "<s>", "eos_token": "</s>"})"));

  dir.Write("chat_template.json", R"({"chat_template": "json {{ bos_token }}"})");
  auto from_json = ChatTemplate::FromCheckpoint(dir.path());
  ASSERT_TRUE(from_json.ok() && from_json->has_value());
  EXPECT_EQ(*(*from_json)->Render(Conversation(true)), "json <s>");

  dir.Write("chat_template.jinja", "jinja {{ eos_token }}\n");
  auto from_jinja = ChatTemplate::FromCheckpoint(dir.path());
  ASSERT_TRUE(from_jinja.ok() && from_jinja->has_value());
  EXPECT_EQ(*(*from_jinja)->Render(Conversation(true)), "jinja </s>");
}

TEST(ChatTemplate, FromCheckpointNamedTemplates) {
  TempDir dir;
  dir.Write("tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "tools"},
                                  {"name": "default", "template": "default"}]})");
  auto t = ChatTemplate::FromCheckpoint(dir.path());
  ASSERT_TRUE(t.ok() && t->has_value()) << t.status();
  EXPECT_EQ(*(*t)->Render(Conversation(true)), "default");
  ChatTemplateInputs with_tools = Conversation(true);
  with_tools.tools = json::array({{{"type", "function"}}});
  EXPECT_EQ(*(*t)->Render(with_tools), "tools");

  dir.Write("tokenizer_config.json", R"({"chat_template": [{"name": "other", "template": "x"}]})");
  auto no_default = ChatTemplate::FromCheckpoint(dir.path());
  EXPECT_EQ(no_default.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplate, FromCheckpointErrorsNameTheFile) {
  TempDir dir;
  dir.Write("tokenizer_config.json", "{not json");
  auto bad_json = ChatTemplate::FromCheckpoint(dir.path());
  ASSERT_FALSE(bad_json.ok());
  EXPECT_NE(bad_json.status().message().find("tokenizer_config.json"), std::string::npos);

  dir.Write("tokenizer_config.json", "{}");
  dir.Write("chat_template.jinja", "line 1\n{% if %}");
  auto bad_template = ChatTemplate::FromCheckpoint(dir.path());
  ASSERT_FALSE(bad_template.ok());
  EXPECT_NE(bad_template.status().message().find("chat_template.jinja line 2:"), std::string::npos)
      << bad_template.status();
}

}  // namespace
}  // namespace kvserve::chat
