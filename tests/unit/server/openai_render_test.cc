// The render endpoints' response (server/http/openai_render.h): the parsed
// request's prompt ids in vLLM's token-in request shape.
#include "server/http/openai_render.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace kvserve::server::http {
namespace {

class OpenAiRenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_.served_model_names = {"tiny", "other"};
    model_.model_name = "tiny";
    model_.tokenizer = tokenizer_.get();
    model_.vocab_size = 258;
    model_.max_model_len = 128;
    model_.kv_capacity_tokens = 1000;
  }

  Json Render(const std::string& body, Endpoint endpoint = Endpoint::kCompletions) {
    absl::StatusOr<Json> json = ParseJsonBody(body);
    EXPECT_TRUE(json.ok()) << json.status();
    absl::StatusOr<GenerationRequest> r = ParseGenerationRequest(endpoint, *json, model_);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? RenderResponse(*r, model_, "cmpl-x") : Json();
  }

  std::unique_ptr<engine::Tokenizer> tokenizer_ = engine::MakeByteTokenizer();
  ModelContext model_;
};

TEST_F(OpenAiRenderTest, CompletionsGiveOneEntryPerPrompt) {
  const Json out = Render(R"({"model": "other", "prompt": ["hi", "yo"], "temperature": 0.5,
    "max_tokens": 7, "seed": 3, "n": 2, "logit_bias": {"5": -100}, "stop": ["x"]})");
  ASSERT_TRUE(out.is_array());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["token_ids"], Json::array({256, 'h', 'i'}));  // BOS added
  EXPECT_EQ(out[1]["token_ids"], Json::array({256, 'y', 'o'}));
  EXPECT_EQ(out[0]["request_id"], "cmpl-x-0");
  EXPECT_EQ(out[1]["request_id"], "cmpl-x-1");
  EXPECT_EQ(out[0]["model"], "tiny");  // the first served name, as every response's
  EXPECT_EQ(out[0]["stream"], false);
  EXPECT_TRUE(out[0]["stream_options"].is_null());
  const Json& s = out[0]["sampling_params"];
  EXPECT_EQ(s["n"], 2);
  EXPECT_EQ(s["temperature"], 0.5);
  EXPECT_EQ(s["max_tokens"], 7);
  EXPECT_EQ(s["seed"], 3);
  EXPECT_EQ(s["stop"], Json::array({"x"}));
  EXPECT_EQ(s["logit_bias"], (Json{{"5", -100.0}}));
  EXPECT_TRUE(s["logprobs"].is_null());
  EXPECT_FALSE(out[0].contains("features"));
  const Json ids = Render(R"({"prompt": [[1, 2, 3]], "stream": true,
    "stream_options": {"include_usage": true}})");
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0]["token_ids"], Json::array({1, 2, 3}));
  EXPECT_EQ(ids[0]["stream"], true);
  EXPECT_EQ(ids[0]["stream_options"]["include_usage"], true);
  EXPECT_EQ(ids[0]["sampling_params"]["max_tokens"], kCompletionsDefaultMaxTokens);
}

TEST_F(OpenAiRenderTest, ChatGivesOneObjectWithTheRenderedConversation) {
  absl::StatusOr<chat::ChatTemplate> tmpl = chat::ChatTemplate::FromSource(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}",
      nlohmann::json::object());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  model_.chat_template = &*tmpl;
  const Json out = Render(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true,
    "top_logprobs": 2})",
                          Endpoint::kChat);
  ASSERT_TRUE(out.is_object()) << out.dump();
  std::vector<int32_t> want;
  for (char c : std::string("<user>hi<assistant>")) want.push_back(static_cast<uint8_t>(c));
  EXPECT_EQ(out["token_ids"], Json(want));  // no BOS: the template writes special tokens
  EXPECT_TRUE(out["features"].is_null());
  EXPECT_EQ(out["request_id"], "cmpl-x");
  EXPECT_EQ(out["sampling_params"]["logprobs"], 2);
  // Chat's default max_tokens: what the model length leaves after the prompt.
  EXPECT_EQ(out["sampling_params"]["max_tokens"], 128 - static_cast<int>(want.size()));
}

}  // namespace
}  // namespace kvserve::server::http
