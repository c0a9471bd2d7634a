// The tool fields of a chat request (server/http/openai_tools.h): what each
// tool_choice reads and constrains, the errors that name their field, the
// forced-call grammar (a structural tag) accepting exactly the calls the
// parser reads back, and tool messages prepared for templates.
#include "server/http/openai_tools.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "engine/grammar/constraint.h"
#include "engine/grammar/grammar_vocab.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/http/openai_protocol.h"
#include "xgrammar/compiler.h"
#include "xgrammar/matcher.h"

namespace kvserve::server::http {
namespace {

using engine::grammar::Constraint;
using engine::grammar::ConstraintKind;
using tool_calling::ToolCallFormat;

constexpr char kTools[] = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                  "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time"}}])";

Json Body(const std::string& extra) {
  return Json::parse(std::string(R"({"messages": [], "tools": )") + kTools + extra + "}");
}

struct Parsed {
  absl::StatusOr<std::optional<ToolCalling>> calling;
  std::optional<Constraint> constraint;
};

Parsed Parse(const Json& body, ToolCallFormat format = ToolCallFormat::kHermes) {
  Parsed p;
  p.calling = ParseToolCalling(body, format, &p.constraint);
  return p;
}

std::string ErrorParam(const Json& body) {
  Parsed p = Parse(body);
  if (p.calling.ok()) return "<ok>";
  return ToApiError(p.calling.status()).param;
}

TEST(OpenAiToolsTest, ChoicesReadAndConstrain) {
  Parsed none = Parse(Body(R"(, "tool_choice": "none")"));
  ASSERT_TRUE(none.calling.ok());
  EXPECT_FALSE(none.calling->has_value());
  EXPECT_FALSE(none.constraint.has_value());

  Parsed no_tools = Parse(Json::parse(R"({"messages": []})"));
  ASSERT_TRUE(no_tools.calling.ok());
  EXPECT_FALSE(no_tools.calling->has_value());

  Parsed automatic = Parse(Body(""));  // "auto" is the default with tools
  ASSERT_TRUE(automatic.calling.ok() && automatic.calling->has_value());
  EXPECT_FALSE((*automatic.calling)->forced);
  EXPECT_EQ((*automatic.calling)->max_calls, 0);
  EXPECT_FALSE(automatic.constraint.has_value());

  Parsed required = Parse(Body(R"(, "tool_choice": "required", "parallel_tool_calls": false)"));
  ASSERT_TRUE(required.calling.ok() && required.calling->has_value()) << required.calling.status();
  EXPECT_TRUE((*required.calling)->forced);
  EXPECT_EQ((*required.calling)->max_calls, 1);
  ASSERT_TRUE(required.constraint.has_value());
  EXPECT_EQ(required.constraint->kind, ConstraintKind::kStructuralTag);

  Parsed named =
      Parse(Body(R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}})"),
            ToolCallFormat::kMistral);
  ASSERT_TRUE(named.calling.ok() && named.calling->has_value()) << named.calling.status();
  EXPECT_EQ((*named.calling)->format, ToolCallFormat::kJson);  // Mistral is forced as JSON
  ASSERT_TRUE(named.constraint.has_value());
}

TEST(OpenAiToolsTest, ErrorsNameTheirField) {
  EXPECT_EQ(ErrorParam(Body(R"(, "tool_choice": "any")")), "tool_choice");
  EXPECT_EQ(ErrorParam(Body(R"(, "tool_choice": {"type": "function", "function": {"name": "x"}})")),
            "tool_choice.function.name");
  EXPECT_EQ(ErrorParam(Body(R"(, "parallel_tool_calls": 1)")), "parallel_tool_calls");
  EXPECT_EQ(ErrorParam(Json::parse(R"({"tool_choice": "required"})")), "tool_choice");
  EXPECT_EQ(ErrorParam(Json::parse(R"({"tools": {}})")), "tools");
  EXPECT_EQ(ErrorParam(Json::parse(R"({"tools": [{"type": "code_interpreter"}]})")),
            "tools[0].type");
  EXPECT_EQ(ErrorParam(Json::parse(R"({"tools": [{"type": "function", "function":
                                        {"name": "has space"}}]})")),
            "tools[0].function.name");
  EXPECT_EQ(ErrorParam(Json::parse(R"({"tools": [{"type": "function", "function":
                                        {"name": "f", "parameters": []}}]})")),
            "tools[0].function.parameters");
  EXPECT_EQ(ErrorParam(Json::parse(R"({"tools": [{"type": "function", "function": {"name": "f"}},
                                                 {"type": "function", "function": {"name": "f"}}]})")),
            "tools[1].function.name");
  // A forced call is a constraint: one per request.
  std::optional<Constraint> existing = Constraint{};
  absl::StatusOr<std::optional<ToolCalling>> r =
      ParseToolCalling(Body(R"(, "tool_choice": "required")"), ToolCallFormat::kHermes, &existing);
  EXPECT_EQ(ToApiError(r.status()).param, "tool_choice");
}

// Whether the constraint's grammar accepts `text` to its end (over the byte
// vocabulary: every string is a token sequence).
bool Accepts(const Constraint& c, const std::string& text) {
  static const std::unique_ptr<engine::Tokenizer> bytes = engine::MakeByteTokenizer();
  absl::StatusOr<xgrammar::Grammar> grammar = engine::grammar::BuildGrammar(c);
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  if (!grammar.ok()) return false;
  const std::vector<int32_t> stops = {257};
  xgrammar::GrammarCompiler compiler(engine::grammar::MakeTokenizerInfo(*bytes, 258, stops), 1);
  xgrammar::GrammarMatcher matcher(compiler.CompileGrammar(*grammar));
  return matcher.AcceptString(text) && matcher.AcceptToken(257) && matcher.IsTerminated();
}

std::vector<ToolFunction> Functions() {
  return {{"get_weather", Json::parse(R"({"type": "object", "properties": {"city": {"type":
           "string"}}, "required": ["city"]})")},
          {"get_time", Json{{"type", "object"}, {"properties", Json::object()}}}};
}

TEST(OpenAiToolsTest, ForcedGrammarAcceptsWhatTheParserReads) {
  struct Want {
    ToolCallFormat format;
    bool one;
    std::string good;
    std::vector<std::string> bad;
  };
  const std::vector<Want> wants = {
      {ToolCallFormat::kHermes,
       false,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"
       "\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
       {"", "Hi", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}\n</tool_call>"}},
      {ToolCallFormat::kHermes,
       true,
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
       {"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
        "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"}},
      {ToolCallFormat::kLlama3Json,
       false,
       "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", "
       "\"parameters\": {\"city\": \"Rome\"}}",
       {"{\"name\": \"get_time\", \"arguments\": {}}"}},
      {ToolCallFormat::kMistral,
       false,
       "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}}]",
       {"[]", "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]"}},
  };
  for (const Want& w : wants) {
    ToolCallFormat parse_format = w.format;
    absl::StatusOr<Constraint> c =
        ForcedToolCallConstraint(Functions(), w.format, w.one, &parse_format);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(Accepts(*c, w.good)) << ToolCallFormatName(w.format) << ": " << w.good;
    for (const std::string& bad : w.bad) {
      EXPECT_FALSE(Accepts(*c, bad)) << ToolCallFormatName(w.format) << ": " << bad;
    }
    // What the grammar allows, the request's parser reads as calls.
    const tool_calling::ParsedToolCalls parsed = tool_calling::ParseToolCalls(parse_format, w.good);
    EXPECT_FALSE(parsed.calls.empty()) << w.good;
    EXPECT_FALSE(parsed.malformed) << w.good;
    EXPECT_TRUE(parsed.content.empty()) << parsed.content;
  }
}

TEST(OpenAiToolsTest, ArgumentsTextBecomesAnObjectForTemplates) {
  Json message = Json::parse(R"({"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_1", "type": "function",
       "function": {"name": "f", "arguments": "{\"city\": \"Paris\"}"}},
      {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "not json"}}]})");
  PrepareToolCallMessage(&message);
  const Json want = {{"city", "Paris"}};
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], want);
  EXPECT_EQ(message["tool_calls"][1]["function"]["arguments"], "not json");  // left as given
}

TEST(OpenAiToolsTest, SpecialMarkersAreKeptInTheText) {
  const std::filesystem::path path =
      std::filesystem::path(::testing::TempDir()) / "tool_markers_tokenizer.json";
  std::ofstream(path) << R"({"version": "1.0",
    "added_tokens": [
      {"id": 3, "content": "[TOOL_CALLS]", "special": true, "normalized": false},
      {"id": 4, "content": "<tool_call>", "special": false, "normalized": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                      "use_regex": true},
    "post_processor": null,
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null,
      "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
      "byte_fallback": false, "ignore_merges": false,
      "vocab": {"a": 0, "b": 1, "c": 2}, "merges": []}})";
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> tokenizer =
      engine::LoadHfTokenizerJson(path.string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_TRUE(MarkerIsSpecialToken(ToolCallFormat::kMistral, tokenizer->get()));
  EXPECT_FALSE(MarkerIsSpecialToken(ToolCallFormat::kHermes, tokenizer->get()));  // not special
  EXPECT_FALSE(MarkerIsSpecialToken(ToolCallFormat::kJson, tokenizer->get()));    // no marker
  const std::unique_ptr<engine::Tokenizer> bytes = engine::MakeByteTokenizer();
  EXPECT_FALSE(MarkerIsSpecialToken(ToolCallFormat::kMistral, bytes.get()));  // many tokens
  EXPECT_FALSE(MarkerIsSpecialToken(ToolCallFormat::kMistral, nullptr));
}

TEST(OpenAiToolsTest, CallIdsAreRandom) {
  const std::string a = RandomToolCallId();
  EXPECT_EQ(a.rfind("call_", 0), 0u);
  EXPECT_EQ(a.size(), 5u + 24u);
  EXPECT_NE(a, RandomToolCallId());
}

}  // namespace
}  // namespace kvserve::server::http
