// The OpenAI request parser (server/http/openai_protocol.h): each field, type
// and range errors naming the parameter, null == absent, unknown fields
// ignored, and the error JSON.
#include "server/http/openai_protocol.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace kvserve::server::http {
namespace {

class OpenAiProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_.served_model_names = {"builtin:tiny"};
    model_.model_name = "builtin:tiny";
    model_.tokenizer = tokenizer_.get();
    model_.vocab_size = 258;
    model_.max_model_len = 128;
    model_.kv_capacity_tokens = 1000;
  }

  absl::StatusOr<GenerationRequest> Parse(const std::string& body,
                                          Endpoint endpoint = Endpoint::kCompletions) {
    absl::StatusOr<Json> json = ParseJsonBody(body);
    if (!json.ok()) return json.status();
    return ParseGenerationRequest(endpoint, *json, model_);
  }
  // The "param" of the error JSON, or "<ok>".
  std::string Param(const std::string& body, Endpoint endpoint = Endpoint::kCompletions) {
    absl::StatusOr<GenerationRequest> r = Parse(body, endpoint);
    if (r.ok()) return "<ok>";
    const ApiError e = ToApiError(r.status(), endpoint == Endpoint::kChat ? "messages" : "prompt");
    EXPECT_EQ(e.http_status, 400) << r.status();
    EXPECT_EQ(e.type, "invalid_request_error");
    return e.param;
  }

  std::unique_ptr<engine::Tokenizer> tokenizer_ = engine::MakeByteTokenizer();
  ModelContext model_;
};

TEST_F(OpenAiProtocolTest, Defaults) {
  auto r = Parse(R"({"prompt": "hi"})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0], (std::vector<int32_t>{256, 'h', 'i'}));  // BOS added
  EXPECT_EQ(r->n, 1);
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->logprobs);
  EXPECT_FALSE(r->echo);
  EXPECT_EQ(r->base.stop.max_tokens, kCompletionsDefaultMaxTokens);
  EXPECT_EQ(r->base.sampling.temperature, 1.0f);
  EXPECT_FALSE(r->base.return_logprobs);
  EXPECT_FALSE(r->seed.has_value());
}

TEST_F(OpenAiProtocolTest, EveryField) {
  auto r = Parse(R"({"model": "builtin:tiny", "prompt": "hi", "max_tokens": 7, "temperature": 0.5,
    "top_p": 0.9, "top_k": 5, "min_p": 0.1, "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "repetition_penalty": 1.2, "seed": 42, "stop": ["a", "bc"], "stop_token_ids": [257],
    "n": 2, "logprobs": 3, "stream": true,
    "stream_options": {"include_usage": true, "continuous_usage_stats": true},
    "ignore_eos": true, "min_tokens": 2, "skip_special_tokens": false,
    "user": "someone"})");
  ASSERT_TRUE(r.ok()) << r.status();
  const scheduler::RequestParams& p = r->base;
  EXPECT_EQ(p.stop.max_tokens, 7);
  EXPECT_EQ(p.sampling.temperature, 0.5f);
  EXPECT_EQ(p.sampling.top_p, 0.9f);
  EXPECT_EQ(p.sampling.top_k, 5);
  EXPECT_EQ(p.sampling.min_p, 0.1f);
  EXPECT_EQ(p.sampling.presence_penalty, 0.5f);
  EXPECT_EQ(p.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(p.sampling.repetition_penalty, 1.2f);
  EXPECT_EQ(r->seed, 42u);
  EXPECT_EQ(p.stop.stop_strings, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(p.stop.stop_token_ids, (std::vector<int32_t>{257}));
  EXPECT_EQ(r->n, 2);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 3);
  EXPECT_TRUE(p.return_logprobs);
  EXPECT_EQ(p.sampling.num_logprobs, 3);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->continuous_usage);
  EXPECT_TRUE(p.stop.ignore_eos);
  EXPECT_EQ(p.stop.min_tokens, 2);
  EXPECT_FALSE(p.stop.skip_special_tokens);
  EXPECT_FALSE(r->echo);
  // Choice i of a prompt draws with seed + i.
  EXPECT_EQ(r->ParamsFor(0, 1000).sampling.seed, 42u);
  EXPECT_EQ(r->ParamsFor(1, 1000).sampling.seed, 43u);
  EXPECT_EQ(r->ParamsFor(1, 1000).prompt_tokens, r->prompts[0]);
}

TEST_F(OpenAiProtocolTest, EchoKeepsThePromptText) {
  auto r = Parse(R"({"prompt": ["hi", "yo"], "echo": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->echo);
  EXPECT_EQ(r->echo_texts, (std::vector<std::string>{"hi", "yo"}));
  auto ids = Parse(R"({"prompt": [104, 111], "echo": true})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->echo_texts, (std::vector<std::string>{"ho"}));  // decoded
}

// Echo with logprobs (lm-eval's loglikelihood requests) and vLLM's
// prompt_logprobs both ask the engine to score the prompt, with the larger
// of their top counts; max_tokens 0 is a prompt scored or echoed alone.
TEST_F(OpenAiProtocolTest, EchoWithLogprobsAndPromptLogprobsScoreThePrompt) {
  const auto scored = [&](const std::string& body) {
    auto r = Parse(body);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->base.num_prompt_logprobs : -2;
  };
  EXPECT_EQ(scored(R"({"prompt": "hi"})"), -1);
  EXPECT_EQ(scored(R"({"prompt": "hi", "echo": true})"), -1);
  EXPECT_EQ(scored(R"({"prompt": "hi", "logprobs": 3})"), -1);
  EXPECT_EQ(scored(R"({"prompt": "hi", "echo": true, "logprobs": 3, "max_tokens": 0})"), 3);
  EXPECT_EQ(scored(R"({"prompt": "hi", "echo": true, "logprobs": 1, "prompt_logprobs": 4})"), 4);
  EXPECT_EQ(scored(R"({"prompt": "hi", "prompt_logprobs": 0})"), 0);
  auto r = Parse(R"({"prompt": "hi", "echo": true, "logprobs": 2, "max_tokens": 0})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->base.stop.max_tokens, 0);
  EXPECT_TRUE(r->echo_logprobs());
}

TEST_F(OpenAiProtocolTest, WithoutSeedTheCallerDrawsOne) {
  auto r = Parse(R"({"prompt": "hi", "n": 2})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ParamsFor(0, 77).sampling.seed, 77u);
  EXPECT_EQ(r->ParamsFor(1, 77).sampling.seed, 78u);
}

TEST_F(OpenAiProtocolTest, PromptForms) {
  auto ids = Parse(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->prompts, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  auto lists = Parse(R"({"prompt": [[1, 2], [3]], "n": 3})");
  ASSERT_TRUE(lists.ok()) << lists.status();
  EXPECT_EQ(lists->prompts.size(), 2u);
  EXPECT_EQ(lists->num_choices(), 6);
  EXPECT_EQ(lists->ParamsFor(3, 0).prompt_tokens, (std::vector<int32_t>{3}));  // 3 / n = 1
  auto texts = Parse(R"({"prompt": ["a", "b"], "add_special_tokens": false})");
  ASSERT_TRUE(texts.ok()) << texts.status();
  EXPECT_EQ(texts->prompts, (std::vector<std::vector<int32_t>>{{'a'}, {'b'}}));
}

TEST_F(OpenAiProtocolTest, TypeAndRangeErrorsNameTheParameter) {
  EXPECT_EQ(Param(R"({"prompt": "hi", "temperature": "hot"})"), "temperature");
  EXPECT_EQ(Param(R"({"prompt": "hi", "temperature": 101})"), "temperature");
  EXPECT_EQ(Param(R"({"prompt": "hi", "top_p": 0})"), "top_p");
  EXPECT_EQ(Param(R"({"prompt": "hi", "top_k": -2})"), "top_k");
  EXPECT_EQ(Param(R"({"prompt": "hi", "top_k": 1.5})"), "top_k");
  EXPECT_EQ(Param(R"({"prompt": "hi", "min_p": 2})"), "min_p");
  EXPECT_EQ(Param(R"({"prompt": "hi", "presence_penalty": 3})"), "presence_penalty");
  EXPECT_EQ(Param(R"({"prompt": "hi", "frequency_penalty": []})"), "frequency_penalty");
  EXPECT_EQ(Param(R"({"prompt": "hi", "repetition_penalty": 0})"), "repetition_penalty");
  EXPECT_EQ(Param(R"({"prompt": "hi", "seed": "x"})"), "seed");
  EXPECT_EQ(Param(R"({"prompt": "hi", "max_tokens": -1})"), "max_tokens");
  EXPECT_EQ(Param(R"({"prompt": "hi", "max_tokens": 0})"), "<ok>");  // the prompt alone
  EXPECT_EQ(Param(R"({"prompt": "hi", "prompt_logprobs": 21})"), "prompt_logprobs");
  EXPECT_EQ(Param(R"({"prompt": "hi", "prompt_logprobs": -1})"), "prompt_logprobs");
  EXPECT_EQ(Param(R"({"prompt": "hi", "max_tokens": true})"), "max_tokens");
  EXPECT_EQ(Param(R"({"prompt": "hi", "min_tokens": -1})"), "min_tokens");
  EXPECT_EQ(Param(R"({"prompt": "hi", "min_tokens": 5, "max_tokens": 4})"), "min_tokens");
  EXPECT_EQ(Param(R"({"prompt": "hi", "n": 0})"), "n");
  EXPECT_EQ(Param(R"({"prompt": "hi", "n": 129})"), "n");
  EXPECT_EQ(Param(R"({"prompt": ["a", "b"], "n": 100})"), "n");
  EXPECT_EQ(Param(R"({"prompt": "hi", "logprobs": 21})"), "logprobs");
  EXPECT_EQ(Param(R"({"prompt": "hi", "logprobs": true})"), "logprobs");
  EXPECT_EQ(Param(R"({"prompt": "hi", "stream": 1})"), "stream");
  EXPECT_EQ(Param(R"({"prompt": "hi", "stream_options": {}})"), "stream_options");
  EXPECT_EQ(Param(R"({"prompt": "hi", "stream": true, "stream_options": 3})"), "stream_options");
  EXPECT_EQ(Param(R"({"prompt": "hi", "stream": true, "stream_options": {"include_usage": 1}})"),
            "stream_options.include_usage");
  EXPECT_EQ(Param(R"({"prompt": "hi", "stop": 5})"), "stop");
  EXPECT_EQ(Param(R"({"prompt": "hi", "stop": ["a", 1]})"), "stop[1]");
  EXPECT_EQ(Param(R"({"prompt": "hi", "stop": ["a", ""]})"), "stop[1]");
  EXPECT_EQ(Param(R"({"prompt": "hi", "stop_token_ids": [300]})"), "stop_token_ids[0]");
  EXPECT_EQ(Param(R"({"prompt": "hi", "ignore_eos": "yes"})"), "ignore_eos");
  EXPECT_EQ(Param(R"({"prompt": "hi", "echo": 1})"), "echo");
  EXPECT_EQ(Param(R"({"prompt": "hi", "model": 3})"), "model");
  EXPECT_EQ(Param(R"({})"), "prompt");
  EXPECT_EQ(Param(R"({"prompt": ""})"), "prompt");
  EXPECT_EQ(Param(R"({"prompt": []})"), "prompt");
  EXPECT_EQ(Param(R"({"prompt": 5})"), "prompt");
  EXPECT_EQ(Param(R"({"prompt": [1, "a"]})"), "prompt[1]");
  EXPECT_EQ(Param(R"({"prompt": ["a", 1]})"), "prompt[1]");
  EXPECT_EQ(Param(R"({"prompt": [[1], []]})"), "prompt[1]");
  EXPECT_EQ(Param(R"({"prompt": [[1], [258]]})"), "prompt[1][0]");
  EXPECT_EQ(Param(R"({"prompt": [-1]})"), "prompt[0]");
}

TEST_F(OpenAiProtocolTest, NullIsAbsentAndUnknownFieldsAreIgnored) {
  auto r = Parse(R"({"prompt": "hi", "temperature": null, "max_tokens": null, "stop": null,
    "n": null, "seed": null, "logprobs": null, "stream": null, "stream_options": null,
    "echo": null, "user": null, "suffix": null, "best_of": 1, "logit_bias": {},
    "future_field": {"a": [1, 2]}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->base.sampling.temperature, 1.0f);
  EXPECT_EQ(r->base.stop.max_tokens, kCompletionsDefaultMaxTokens);
  EXPECT_TRUE(r->base.stop.stop_strings.empty());
  EXPECT_EQ(r->n, 1);
  EXPECT_FALSE(r->seed.has_value());
  EXPECT_FALSE(r->logprobs);
}

// A field the API defines that kvserve does not implement is a 400 naming it
// unless it holds its no-op value; nothing is silently ignored.
TEST_F(OpenAiProtocolTest, UnimplementedFieldsAreRejectedByName) {
  EXPECT_EQ(Param(R"({"prompt": "hi", "suffix": "x"})"), "suffix");
  EXPECT_EQ(Param(R"({"prompt": "hi", "best_of": 2})"), "best_of");
  EXPECT_EQ(Param(R"({"prompt": "hi", "best_of": 2, "n": 2})"), "<ok>");
  EXPECT_EQ(Param(R"({"prompt": "hi", "suffix": ""})"), "<ok>");
  EXPECT_EQ(Param(R"({"prompt": "hi", "structured_outputs": {"choice": ["a"],
    "structural_tag": "{}"}})"),
            "structured_outputs.structural_tag");
  EXPECT_EQ(Param(R"({"prompt": "hi", "guided_regex": "a+", "guided_whitespace_pattern": " "})"),
            "guided_whitespace_pattern");
  absl::StatusOr<chat::ChatTemplate> tmpl = chat::ChatTemplate::FromSource(
      "{% for m in messages %}{{ m.content }}{% endfor %}", nlohmann::json::object());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  model_.chat_template = &*tmpl;
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], )";
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  EXPECT_EQ(Param(chat + R"("response_format": {"type": "structural_tag"}})", Endpoint::kChat),
            "response_format.type");
  EXPECT_EQ(Param(chat + R"("response_format": {"type": "json_schema", "json_schema": {}}})",
                  Endpoint::kChat),
            "response_format.json_schema.schema");
  EXPECT_EQ(Param(chat + R"("response_format": {"type": "text"}})", Endpoint::kChat), "<ok>");
  // Tool calling is served (openai_tools.h); its own errors are openai_tools_test's.
  EXPECT_EQ(Param(chat + tools + "}", Endpoint::kChat), "<ok>");
  EXPECT_EQ(Param(chat + tools + R"(, "tool_choice": "auto"})", Endpoint::kChat), "<ok>");
  EXPECT_EQ(Param(chat + tools + R"(, "tool_choice": "required"})", Endpoint::kChat), "<ok>");
  EXPECT_EQ(Param(chat + tools + R"(, "tool_choice": "none"})", Endpoint::kChat), "<ok>");
  EXPECT_EQ(Param(chat + tools + R"(, "tool_choice": "required", "response_format": {"type":
                  "json_object"}})",
                  Endpoint::kChat),
            "tool_choice");
  EXPECT_EQ(Param(chat + R"("function_call": "auto"})", Endpoint::kChat), "function_call");
  EXPECT_EQ(Param(chat + R"("tools": [], "tool_choice": "auto"})", Endpoint::kChat), "<ok>");
  EXPECT_EQ(Param(chat + R"("tool_choice": {"type": "function", "function": {"name": "f"}}})",
                  Endpoint::kChat),
            "tool_choice.function.name");
  EXPECT_EQ(Param(chat + R"("functions": [{"name": "f"}]})", Endpoint::kChat), "functions");
  EXPECT_EQ(Param(chat + R"("continue_final_message": true})", Endpoint::kChat),
            "continue_final_message");
  EXPECT_EQ(Param(chat + R"("continue_final_message": false})", Endpoint::kChat), "<ok>");
  EXPECT_EQ(Param(chat + R"("modalities": ["text", "audio"]})", Endpoint::kChat), "modalities");
  EXPECT_EQ(Param(chat + R"("modalities": ["text"]})", Endpoint::kChat), "<ok>");
}

TEST_F(OpenAiProtocolTest, LogitBiasIsParsedSortedAndChecked) {
  auto r = Parse(R"({"prompt": "hi", "logit_bias": {"200": -100, "5": 100, "17": 0.5}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->base.sampling.logit_bias,
            (std::vector<engine::TokenBias>{{5, 100.0f}, {17, 0.5f}, {200, -100.0f}}));
  EXPECT_TRUE(r->ParamsFor(0, 1).sampling.logit_bias == r->base.sampling.logit_bias);
  auto empty = Parse(R"({"prompt": "hi", "logit_bias": {}})");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->base.sampling.logit_bias.empty());
  // An id outside the vocabulary is a 400 naming the id.
  auto outside = Parse(R"({"prompt": "hi", "logit_bias": {"258": 1}})");
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("token id 258 outside the vocabulary [0, 258)"),
            std::string::npos)
      << outside.status();
  EXPECT_EQ(Param(R"({"prompt": "hi", "logit_bias": {"258": 1}})"), "logit_bias");
  EXPECT_EQ(Param(R"({"prompt": "hi", "logit_bias": {"99999999999": 1}})"), "logit_bias");
  EXPECT_EQ(Param(R"({"prompt": "hi", "logit_bias": {"-1": 1}})"), "logit_bias");
  EXPECT_EQ(Param(R"({"prompt": "hi", "logit_bias": {"a": 1}})"), "logit_bias");
  EXPECT_EQ(Param(R"({"prompt": "hi", "logit_bias": {" 5": 1}})"), "logit_bias");
  EXPECT_EQ(Param(R"({"prompt": "hi", "logit_bias": {"5": 100.5}})"), "logit_bias");
  EXPECT_EQ(Param(R"({"prompt": "hi", "logit_bias": {"5": -101}})"), "logit_bias");
  EXPECT_EQ(Param(R"({"prompt": "hi", "logit_bias": {"5": "1"}})"), "logit_bias[\"5\"]");
  EXPECT_EQ(Param(R"({"prompt": "hi", "logit_bias": {"5": 1, "05": 2}})"), "logit_bias");
  EXPECT_EQ(Param(R"({"prompt": "hi", "logit_bias": [1, 2]})"), "logit_bias");
  absl::StatusOr<chat::ChatTemplate> tmpl = chat::ChatTemplate::FromSource(
      "{% for m in messages %}{{ m.content }}{% endfor %}", nlohmann::json::object());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  model_.chat_template = &*tmpl;
  auto chat = Parse(R"({"messages": [{"role": "user", "content": "x"}],
    "logit_bias": {"5": -100}})",
                    Endpoint::kChat);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->base.sampling.logit_bias, (std::vector<engine::TokenBias>{{5, -100.0f}}));
}

TEST_F(OpenAiProtocolTest, ContinueFinalMessageLeavesTheAssistantTurnOpen) {
  absl::StatusOr<chat::ChatTemplate> tmpl = chat::ChatTemplate::FromSource(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}</>{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}",
      nlohmann::json::object());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  model_.chat_template = &*tmpl;
  const std::string prefill =
      R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "ab"}], )";
  auto r = Parse(prefill + R"("continue_final_message": true, "add_generation_prompt": false})",
                 Endpoint::kChat);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<int32_t> want;
  for (char c : std::string("<user>x</><assistant>ab")) want.push_back(c);
  EXPECT_EQ(r->prompts[0], want);
  // add_generation_prompt defaults to true: both true is a 400 (transformers').
  EXPECT_EQ(Param(prefill + R"("continue_final_message": true})", Endpoint::kChat),
            "continue_final_message");
  EXPECT_EQ(Param(prefill + R"("continue_final_message": true, "add_generation_prompt": true})",
                  Endpoint::kChat),
            "continue_final_message");
  // The last message must be the assistant's.
  EXPECT_EQ(Param(R"({"messages": [{"role": "user", "content": "x"}],
    "continue_final_message": true, "add_generation_prompt": false})",
                  Endpoint::kChat),
            "continue_final_message");
  EXPECT_EQ(Param(prefill + R"("continue_final_message": 1})", Endpoint::kChat),
            "continue_final_message");
  // /tokenize renders the same prompt.
  absl::StatusOr<Json> body =
      ParseJsonBody(prefill + R"("continue_final_message": true, "add_generation_prompt": false})");
  ASSERT_TRUE(body.ok());
  auto ids = ParseTokenizeRequest(*body, model_);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, want);
}

TEST_F(OpenAiProtocolTest, ModelMustBeOneOfTheServedNames) {
  model_.served_model_names = {"a", "b"};
  model_.model_name = "a";
  EXPECT_TRUE(Parse(R"({"prompt": "hi", "model": "b"})").ok());
  EXPECT_TRUE(Parse(R"({"prompt": "hi"})").ok());
  auto other = Parse(R"({"prompt": "hi", "model": "builtin:tiny"})");
  ASSERT_FALSE(other.ok());
  const ApiError e = ToApiError(other.status());
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(e.param, "model");
  EXPECT_NE(e.message.find("`a`, `b`"), std::string::npos) << e.message;
  EXPECT_TRUE(CheckServedModel("a", model_).ok());
  EXPECT_EQ(CheckServedModel("c", model_).code(), absl::StatusCode::kNotFound);
}

TEST_F(OpenAiProtocolTest, IntegralFloatsAndLargeSeeds) {
  auto r = Parse(R"({"prompt": "hi", "max_tokens": 4.0, "seed": -1})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->base.stop.max_tokens, 4);
  EXPECT_EQ(r->seed, ~uint64_t{0});
  auto u = Parse(R"({"prompt": "hi", "seed": 18446744073709551615})");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->seed, ~uint64_t{0});
}

TEST_F(OpenAiProtocolTest, ModelMustBeTheServedOne) {
  auto r = Parse(R"({"prompt": "hi", "model": "gpt-4"})");
  ASSERT_FALSE(r.ok());
  const ApiError e = ToApiError(r.status());
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.param, "model");
  EXPECT_EQ(e.code, "model_not_found");
}

TEST_F(OpenAiProtocolTest, BodyErrors) {
  for (const char* body : {"", "{", "[1]", "3", "{\"a\": }", "\"str\""}) {
    auto r = ParseJsonBody(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(ToApiError(r.status()).param, "body") << body;
  }
  std::string deep(100, '[');
  deep += std::string(100, ']');
  EXPECT_EQ(ToApiError(ParseJsonBody("{\"a\":" + deep + "}").status()).param, "body");
  std::string ok_depth = "{\"a\":" + std::string(60, '[') + std::string(60, ']') + "}";
  EXPECT_TRUE(ParseJsonBody(ok_depth).ok());
  // Invalid UTF-8 inside a string is refused by the JSON parser.
  EXPECT_FALSE(ParseJsonBody("{\"prompt\": \"\xff\"}").ok());
}

TEST_F(OpenAiProtocolTest, ChatWithoutTemplateIs400OnMessages) {
  EXPECT_EQ(Param(R"({"messages": [{"role": "user", "content": "hi"}]})", Endpoint::kChat),
            "messages");
}

TEST_F(OpenAiProtocolTest, ChatRendersTheTemplate) {
  absl::StatusOr<chat::ChatTemplate> tmpl = chat::ChatTemplate::FromSource(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<a>{% endif %}",
      nlohmann::json::object());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  model_.chat_template = &*tmpl;
  auto r = Parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"},
    {"type": "text", "text": "y"}]}], "max_completion_tokens": 3, "logprobs": true,
    "top_logprobs": 2})",
                 Endpoint::kChat);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string want = "<user>x\ny<a>";  // parts joined with \n; no BOS
  EXPECT_EQ(r->prompts[0], std::vector<int32_t>(want.begin(), want.end()));
  EXPECT_EQ(r->base.stop.max_tokens, 3);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 2);
  // Without a limit: the room the model length leaves.
  auto open = Parse(R"({"messages": [{"role": "user", "content": "hi"}]})", Endpoint::kChat);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(open->base.stop.max_tokens, 128 - static_cast<int32_t>(open->prompts[0].size()));
  auto no_prompt = Parse(R"({"messages": [{"role": "user", "content": "hi"}],
    "add_generation_prompt": false})",
                         Endpoint::kChat);
  ASSERT_TRUE(no_prompt.ok());
  EXPECT_EQ(no_prompt->prompts[0].size(), std::string("<user>hi").size());

  EXPECT_EQ(Param(R"({"messages": []})", Endpoint::kChat), "messages");
  EXPECT_EQ(Param(R"({"messages": "hi"})", Endpoint::kChat), "messages");
  EXPECT_EQ(Param(R"({"messages": [3]})", Endpoint::kChat), "messages[0]");
  EXPECT_EQ(Param(R"({"messages": [{"content": "x"}]})", Endpoint::kChat), "messages[0].role");
  EXPECT_EQ(Param(R"({"messages": [{"role": "user", "content": 3}]})", Endpoint::kChat),
            "messages[0].content");
  EXPECT_EQ(Param(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
                  Endpoint::kChat),
            "messages[0].content[0].type");
  EXPECT_EQ(
      Param(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", Endpoint::kChat),
      "messages[0].content[0].text");
  EXPECT_EQ(Param(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
                  Endpoint::kChat),
            "top_logprobs");
  EXPECT_EQ(
      Param(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", Endpoint::kChat),
      "logprobs");
  EXPECT_EQ(
      Param(R"({"messages": [{"role": "user", "content": "x"}], "tools": 1})", Endpoint::kChat),
      "tools");
  // A prompt that fills the model: no room for the answer.
  const std::string long_text(200, 'z');
  EXPECT_EQ(Param(R"({"messages": [{"role": "user", "content": ")" + long_text + R"("}]})",
                  Endpoint::kChat),
            "messages");
}

TEST_F(OpenAiProtocolTest, TokenizeAndDetokenize) {
  auto tok = ParseTokenizeRequest(*ParseJsonBody(R"({"prompt": "hi"})"), model_);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(*tok, (std::vector<int32_t>{256, 'h', 'i'}));
  tok = ParseTokenizeRequest(*ParseJsonBody(R"({"prompt": "hi", "add_special_tokens": false})"),
                             model_);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(*tok, (std::vector<int32_t>{'h', 'i'}));
  EXPECT_FALSE(ParseTokenizeRequest(*ParseJsonBody(R"({"prompt": 3})"), model_).ok());
  auto detok = ParseDetokenizeRequest(*ParseJsonBody(R"({"tokens": [104, 105]})"), model_);
  ASSERT_TRUE(detok.ok());
  EXPECT_EQ(*detok, (std::vector<int32_t>{104, 105}));
  EXPECT_EQ(
      ToApiError(ParseDetokenizeRequest(*ParseJsonBody(R"({"tokens": [1, 999]})"), model_).status())
          .param,
      "tokens[1]");
}

TEST_F(OpenAiProtocolTest, ErrorJsonAndStatusMapping) {
  const Json j = ErrorJson(ToApiError(absl::InvalidArgumentError("top_p: must be in (0, 1]")));
  EXPECT_EQ(Dump(j),
            R"({"error":{"message":"top_p: must be in (0, 1]","type":"invalid_request_error",)"
            R"("param":"top_p","code":null}})");
  EXPECT_EQ(ToApiError(absl::UnauthenticatedError("x")).http_status, 401);
  EXPECT_EQ(ToApiError(absl::ResourceExhaustedError("x")).http_status, 429);
  EXPECT_EQ(ToApiError(absl::UnavailableError("x")).http_status, 503);
  EXPECT_EQ(ToApiError(absl::InternalError("x")).http_status, 500);
  // The engine's names become the OpenAI parameters.
  EXPECT_EQ(
      ToApiError(absl::InvalidArgumentError("prompt_tokens + max_tokens: 5 + 9 exceeds")).param,
      "max_tokens");
  EXPECT_EQ(ToApiError(absl::InvalidArgumentError("prompt_tokens: too long"), "messages").param,
            "messages");
  EXPECT_EQ(ToApiError(absl::InvalidArgumentError("no parameter named here")).param, "");
  // Text that is not UTF-8 never throws out of Dump.
  EXPECT_EQ(Dump(Json("a\xff")), "\"a\\ufffd\"");
}

TEST_F(OpenAiProtocolTest, ToolCallingAndToolMessages) {
  // The template writes each assistant call's arguments.city (an object to
  // it, though the client sent JSON text) and each tool result.
  absl::StatusOr<chat::ChatTemplate> tmpl = chat::ChatTemplate::FromSource(
      "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}"
      "[{{ c.function.name }}:{{ c.function.arguments.city }}]{% endfor %}"
      "{% elif m.role == 'tool' %}({{ m.tool_call_id }}={{ m.content }}){% else %}"
      "{{ m.content }}{% endif %}{% endfor %}",
      nlohmann::json::object());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  model_.chat_template = &*tmpl;
  model_.tool_call_format = tool_calling::ToolCallFormat::kMistral;
  auto r = Parse(R"({"messages": [{"role": "user", "content": "w?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "5C"}],
      "tools": [{"type": "function", "function": {"name": "get_weather"}}]})",
                 Endpoint::kChat);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(tokenizer_->Decode(r->prompts[0], false), "w?[get_weather:Oslo](call_1=5C)");
  ASSERT_TRUE(r->tool_calling.has_value());
  EXPECT_EQ(r->tool_calling->format, tool_calling::ToolCallFormat::kMistral);
  EXPECT_FALSE(r->tool_calling->forced);
  EXPECT_FALSE(r->base.constraint.has_value());
  // "[TOOL_CALLS]" is no special token of the byte tokenizer: nothing to keep.
  EXPECT_TRUE(r->base.stop.skip_special_tokens);

  r = Parse(R"({"messages": [{"role": "user", "content": "w?"}], "tool_choice": "required",
      "tools": [{"type": "function", "function": {"name": "get_weather"}}]})",
            Endpoint::kChat);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->base.constraint.has_value());
  EXPECT_EQ(r->base.constraint->kind, engine::grammar::ConstraintKind::kStructuralTag);
  EXPECT_EQ(r->tool_calling->format, tool_calling::ToolCallFormat::kJson);

  r = Parse(R"({"messages": [{"role": "user", "content": "w?"}], "tool_choice": "none",
      "tools": [{"type": "function", "function": {"name": "get_weather"}}]})",
            Endpoint::kChat);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->tool_calling.has_value());
  EXPECT_TRUE(r->base.stop.skip_special_tokens);
}

}  // namespace
}  // namespace kvserve::server::http
