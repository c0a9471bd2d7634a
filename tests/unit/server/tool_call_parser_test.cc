// Tool calls out of model text (server/tool_calling/tool_call_parser.h):
// every format whole, malformed text as content, and streaming: every way of
// cutting a text into chunks gives the calls and content of the whole text.
#include "server/tool_calling/tool_call_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace kvserve::server::tool_calling {
namespace {

using F = ToolCallFormat;

struct Case {
  const char* label;
  F format;
  std::string text;
  std::string content;
  std::vector<ToolCall> calls;
  bool malformed = false;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      // Hermes / Qwen.
      {"hermes one",
       F::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
       "</tool_call>",
       "",
       {{"get_weather", R"({"city":"Paris"})"}}},
      {"hermes content before and between",
       F::kHermes,
       "Let me check.\n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
       "<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}</tool_call>",
       "Let me check.\n\n",
       {{"a", "{}"}, {"b", R"({"x":[1,{"y":"}"}]})"}}},
      {"hermes unclosed last call",
       F::kHermes,
       "<tool_call>{\"name\": \"a\", \"arguments\": {\"k\": 1}}",
       "",
       {{"a", R"({"k":1})"}}},
      {"hermes arguments as JSON text, no arguments",
       F::kHermes,
       "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"k\\\": 2}\"}</tool_call>"
       "<tool_call>{\"name\": \"b\"}</tool_call>",
       "",
       {{"a", R"({"k":2})"}, {"b", "{}"}}},
      {"hermes only text",
       F::kHermes,
       "The weather is <b>fine</b> today.",
       "The weather is <b>fine</b> today.",
       {}},
      {"hermes spaces only, no calls, kept", F::kHermes, " \n ", " \n ", {}},
      {"hermes broken JSON is content",
       F::kHermes,
       "Sure <tool_call>{\"name\": \"a\", \"arguments\": {\"k\": }}</tool_call> done",
       "Sure <tool_call>{\"name\": \"a\", \"arguments\": {\"k\": }}</tool_call> done",
       {},
       true},
      {"hermes no name is content",
       F::kHermes,
       "<tool_call>{\"arguments\": {}}</tool_call>",
       "<tool_call>{\"arguments\": {}}</tool_call>",
       {},
       true},
      {"hermes unfinished JSON is content",
       F::kHermes,
       "<tool_call>{\"name\": \"a\", \"argu",
       "<tool_call>{\"name\": \"a\", \"argu",
       {},
       true},
      {"hermes valid call then broken one",
       F::kHermes,
       "<tool_call>{\"name\": \"a\"}</tool_call> <tool_call>[1]</tool_call>",
       " <tool_call>[1]</tool_call>",
       {{"a", "{}"}},
       true},
      {"hermes text after JSON is content",
       F::kHermes,
       "<tool_call>{\"name\": \"a\"} trailing",
       "<tool_call>{\"name\": \"a\"} trailing",
       {},
       true},
      {"hermes arguments not an object",
       F::kHermes,
       "<tool_call>{\"name\": \"a\", \"arguments\": 3}</tool_call>",
       "<tool_call>{\"name\": \"a\", \"arguments\": 3}</tool_call>",
       {},
       true},
      // Llama 3.x JSON.
      {"llama3 python_tag",
       F::kLlama3Json,
       "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
       "",
       {{"get_weather", R"({"city":"Oslo"})"}}},
      {"llama3 bare, two calls",
       F::kLlama3Json,
       " {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": 1}}\n",
       "",
       {{"a", "{}"}, {"b", R"({"n":1})"}}},
      {"llama3 text", F::kLlama3Json, "Hello {there}", "Hello {there}", {}},
      {"llama3 broken is all content",
       F::kLlama3Json,
       "{\"name\": \"a\", \"parameters\": {}} and more",
       "{\"name\": \"a\", \"parameters\": {}} and more",
       {},
       true},
      {"llama3 object without name",
       F::kLlama3Json,
       "{\"answer\": 42}",
       "{\"answer\": 42}",
       {},
       true},
      {"llama3 partial tag is text", F::kLlama3Json, "<|python", "<|python", {}},
      // Mistral.
      {"mistral array",
       F::kMistral,
       "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}}, {\"name\": \"b\", "
       "\"arguments\": {}}]",
       "",
       {{"a", R"({"q":"x"})"}, {"b", "{}"}}},
      {"mistral content and one object",
       F::kMistral,
       "I will search. [TOOL_CALLS] {\"name\": \"s\", \"arguments\": {\"q\": 1}}",
       "I will search. ",
       {{"s", R"({"q":1})"}}},
      {"mistral broken",
       F::kMistral,
       "[TOOL_CALLS][{\"name\": \"a\"}, {\"nam\": 1}]",
       "[TOOL_CALLS][{\"name\": \"a\"}, {\"nam\": 1}]",
       {},
       true},
      {"mistral unclosed",
       F::kMistral,
       "ok [TOOL_CALLS][{\"name\": \"a\"}",
       "ok [TOOL_CALLS][{\"name\": \"a\"}",
       {},
       true},
      {"mistral empty list is content",
       F::kMistral,
       "[TOOL_CALLS][] ok",
       "[TOOL_CALLS][] ok",
       {},
       true},
      // Generic JSON.
      {"json object",
       F::kJson,
       "{\"name\": \"f\", \"arguments\": {\"a\": true}}",
       "",
       {{"f", R"({"a":true})"}}},
      {"json array with parameters",
       F::kJson,
       "\n[{\"name\": \"f\", \"parameters\": {}}, {\"name\": \"g\"}]\n",
       "",
       {{"f", "{}"}, {"g", "{}"}}},
      {"json text", F::kJson, "No tools needed.", "No tools needed.", {}},
      {"json object that is no call",
       F::kJson,
       "{\"city\": \"Paris\"}",
       "{\"city\": \"Paris\"}",
       {},
       true},
      {"json trailing text", F::kJson, "{\"name\": \"f\"} ok", "{\"name\": \"f\"} ok", {}, true},
      {"json too deep",
       F::kJson,
       std::string(100, '[') + std::string(100, ']'),
       std::string(100, '[') + std::string(100, ']'),
       {},
       true},
  };
  return cases;
}

// Feeds the chunks, then finishes; the concatenated deltas.
ParsedToolCalls Stream(F format, const std::vector<std::string>& chunks) {
  ToolCallParser parser(format);
  ParsedToolCalls out;
  auto add = [&](ToolCallDelta d) {
    out.content += d.content;
    for (ToolCall& c : d.calls) out.calls.push_back(std::move(c));
  };
  for (const std::string& chunk : chunks) add(parser.Feed(chunk));
  add(parser.Finish());
  out.malformed = parser.malformed();
  return out;
}

TEST(ToolCallParserTest, EveryFormatWhole) {
  for (const Case& c : Cases()) {
    const ParsedToolCalls got = ParseToolCalls(c.format, c.text);
    EXPECT_EQ(got.content, c.content) << c.label;
    EXPECT_EQ(got.calls, c.calls) << c.label;
    EXPECT_EQ(got.malformed, c.malformed) << c.label;
  }
}

TEST(ToolCallParserTest, EveryTwoChunkSplitGivesTheWholeResult) {
  for (const Case& c : Cases()) {
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      const ParsedToolCalls got = Stream(c.format, {c.text.substr(0, cut), c.text.substr(cut)});
      EXPECT_EQ(got.content, c.content) << c.label << " cut at " << cut;
      EXPECT_EQ(got.calls, c.calls) << c.label << " cut at " << cut;
      EXPECT_EQ(got.malformed, c.malformed) << c.label << " cut at " << cut;
    }
  }
}

TEST(ToolCallParserTest, RandomChunksAndBytewiseGiveTheWholeResult) {
  std::mt19937 rng(54);
  for (const Case& c : Cases()) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<std::string> chunks;
      for (size_t pos = 0; pos < c.text.size();) {
        const size_t n = trial == 0 ? 1 : 1 + rng() % 7;  // trial 0: byte by byte
        chunks.push_back(c.text.substr(pos, n));
        pos += n;
      }
      const ParsedToolCalls got = Stream(c.format, chunks);
      EXPECT_EQ(got.content, c.content) << c.label << " trial " << trial;
      EXPECT_EQ(got.calls, c.calls) << c.label << " trial " << trial;
    }
  }
}

TEST(ToolCallParserTest, StreamsContentAtOnceAndCallsWhenTheyClose) {
  ToolCallParser hermes(F::kHermes);
  // "<tool" may start a marker: held back; the text before it is not.
  EXPECT_EQ(hermes.Feed("Checking <tool").content, "Checking ");
  ToolCallDelta d = hermes.Feed("_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}}");
  EXPECT_TRUE(d.content.empty());
  EXPECT_TRUE(d.calls.empty());  // complete JSON, but </tool_call> may still come
  d = hermes.Feed("\n</tool_call>");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, R"({"x":1})");
  EXPECT_EQ(hermes.Feed("<b>").content, "<b>");  // not a marker prefix
  EXPECT_TRUE(hermes.Finish().content.empty());
  EXPECT_EQ(hermes.num_calls(), 1);

  ToolCallParser mistral(F::kMistral);
  EXPECT_EQ(mistral.Feed("[TOOL_CALLS][{\"name\": \"a\"}]").calls.size(), 1u);

  ToolCallParser llama(F::kLlama3Json);
  EXPECT_TRUE(llama.Feed("{\"name\": \"a\", \"parameters\": {}}").calls.empty());  // whole text
  EXPECT_EQ(llama.Finish().calls.size(), 1u);
  ToolCallParser text(F::kLlama3Json);
  EXPECT_EQ(text.Feed("Hi ").content, "Hi ");  // cannot become a call: streamed
}

TEST(ToolCallParserTest, SpacesBeforeCallsAreDroppedAndKeptBeforeText) {
  ToolCallParser parser(F::kHermes);
  EXPECT_TRUE(parser.Feed("\n\n").content.empty());  // held: could be the only content
  EXPECT_EQ(parser.Feed("<tool_call>{\"name\": \"a\"}</tool_call>").calls.size(), 1u);
  EXPECT_EQ(parser.Feed(" ok").content, "\n\n ok");  // text came: every space kept
}

TEST(ToolCallParserTest, FormatNamesAndDetection) {
  for (F f : {F::kHermes, F::kLlama3Json, F::kMistral, F::kJson}) {
    EXPECT_EQ(ToolCallFormatFromName(ToolCallFormatName(f)), f);
  }
  EXPECT_FALSE(ToolCallFormatFromName("auto").has_value());
  EXPECT_EQ(DetectToolCallFormat("{{- '<tool_call>\\n' }}"), F::kHermes);
  EXPECT_EQ(DetectToolCallFormat("{{ '[TOOL_CALLS]' }}"), F::kMistral);
  EXPECT_EQ(DetectToolCallFormat("{%- if message.role == 'ipython' %}"), F::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat("{{ '<|python_tag|>' }}"), F::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat("{{ messages }}"), F::kJson);
}

}  // namespace
}  // namespace kvserve::server::tool_calling
