// Engine outputs -> OpenAI JSON (server/http/openai_format.h).
#include "server/http/openai_format.h"

#include <gtest/gtest.h>

#include <memory>

namespace kvserve::server::http {
namespace {

std::vector<scheduler::TokenLogprobs> Logprobs() {
  // Byte tokenizer: 'h', then 0xC3 (half of a two-byte character).
  return {{.token = 'h', .logprob = -0.5f, .top = {{'h', -0.5f}, {'i', -1.0f}}},
          {.token = 0xC3, .logprob = -2.0f, .top = {{'a', -0.25f}}}};
}

TEST(OpenAiFormatTest, CompletionLogprobs) {
  const auto tokenizer = engine::MakeByteTokenizer();
  int64_t offset = 3;
  const Json lp = CompletionLogprobs(Logprobs(), tokenizer.get(), &offset);
  EXPECT_EQ(Dump(lp), R"({"tokens":["h","\ufffd"],"token_logprobs":[-0.5,-2.0],)"
                      R"("top_logprobs":[{"h":-0.5,"i":-1.0},{"a":-0.25}],"text_offset":[3,4]})");
  EXPECT_EQ(offset, 5);
  Json merged;
  AppendCompletionLogprobs(lp, &merged);
  AppendCompletionLogprobs(lp, &merged);
  EXPECT_EQ(merged["tokens"].size(), 4u);
  EXPECT_EQ(merged["text_offset"].size(), 4u);
}

TEST(OpenAiFormatTest, ChatLogprobsCarryTheRawBytes) {
  const auto tokenizer = engine::MakeByteTokenizer();
  const Json content = ChatLogprobContent(Logprobs(), tokenizer.get());
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[1]["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(content[1]["bytes"], Json::array({0xC3}));
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "i");
  EXPECT_EQ(content[0]["top_logprobs"][1]["bytes"], Json::array({'i'}));
}

TEST(OpenAiFormatTest, UsageAndFinishReasons) {
  EXPECT_EQ(Dump(UsageJson(5, 7, 2)),
            R"({"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,)"
            R"("prompt_tokens_details":{"cached_tokens":2}})");
  EXPECT_EQ(FinishReasonString(scheduler::FinishReason::kStopString), "stop");
  EXPECT_EQ(FinishReasonString(scheduler::FinishReason::kStopToken), "stop");
  EXPECT_EQ(FinishReasonString(scheduler::FinishReason::kLength), "length");
  EXPECT_EQ(FinishReasonString(scheduler::FinishReason::kAborted), std::nullopt);
  EXPECT_EQ(FinishReasonString(scheduler::FinishReason::kError), std::nullopt);
  EXPECT_EQ(CodePoints("a\xC3\xA9\xE6\x97\xA5"), 3);
}

// Generated text may hold any character; httpx-based SSE readers (GuideLLM)
// split lines at U+0085, U+2028 and U+2029 as str.splitlines does, so Dump
// must never emit them raw: every body is ASCII and one line.
TEST(OpenAiFormatTest, DumpIsOneAsciiLineWhateverTheText) {
  Json chunk = Json::object();
  chunk["text"] = "a\u2028b\u2029c\u0085d\u000be\u001cf\r\ng\u00e9\U0001F600";
  const std::string text = Dump(chunk);
  for (unsigned char c : text) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << text;
  EXPECT_NE(text.find("\\u2028"), std::string::npos) << text;
  EXPECT_EQ(Json::parse(text), chunk);
}

}  // namespace
}  // namespace kvserve::server::http
