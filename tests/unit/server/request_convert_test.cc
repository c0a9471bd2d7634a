#include "server/request_convert.h"

#include <gtest/gtest.h>

#include "engine/tokenizer/tokenizer.h"

namespace kvserve::server {
namespace {

class RequestConvertTest : public ::testing::Test {
 protected:
  std::unique_ptr<engine::Tokenizer> tokenizer_ = engine::MakeByteTokenizer();
  static constexpr int32_t kVocab = 258;

  absl::StatusOr<scheduler::RequestParams> Convert(const v1::GenerateRequest& r) {
    return ToRequestParams(r, tokenizer_.get(), kVocab);
  }
  // The InvalidArgument message, or "" if the request converts.
  std::string Error(const v1::GenerateRequest& r) {
    auto p = Convert(r);
    if (p.ok()) return "";
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(p.status().message());
  }
};

TEST_F(RequestConvertTest, DefaultsAreTheDocumentedOnes) {
  v1::GenerateRequest r;
  r.set_text("hi");
  auto p = Convert(r);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->prompt_tokens, (std::vector<int32_t>{256, 'h', 'i'}));  // BOS added
  EXPECT_EQ(p->sampling.temperature, 1.0f);
  EXPECT_EQ(p->sampling.top_p, 1.0f);
  EXPECT_EQ(p->sampling.top_k, 0);
  EXPECT_EQ(p->sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(p->stop.max_tokens, 16);
  EXPECT_EQ(p->stop.min_tokens, 0);
  EXPECT_FALSE(p->stop.ignore_eos);
  EXPECT_TRUE(p->stop.skip_special_tokens);
  EXPECT_FALSE(p->return_logprobs);
  EXPECT_EQ(p->priority, 0);
}

TEST_F(RequestConvertTest, CopiesEveryField) {
  v1::GenerateRequest r;
  r.set_text("hi");
  r.set_add_special_tokens(false);
  auto* s = r.mutable_sampling();
  s->set_temperature(0);
  s->set_top_k(5);
  s->set_top_p(0.5f);
  s->set_min_p(0.1f);
  s->set_repetition_penalty(1.1f);
  s->set_presence_penalty(0.2f);
  s->set_frequency_penalty(-0.3f);
  s->set_seed(42);
  (*s->mutable_logit_bias())[200] = -100.0f;
  (*s->mutable_logit_bias())[7] = 100.0f;
  (*s->mutable_logit_bias())[31] = 0.5f;
  auto* st = r.mutable_stopping();
  st->set_max_tokens(7);
  st->set_min_tokens(2);
  st->set_ignore_eos(true);
  st->add_stop_token_ids(3);
  st->add_stop("END");
  st->set_skip_special_tokens(false);
  r.set_logprobs(4);
  r.set_priority(-2);
  r.set_cache_salt("tenant-a");
  auto p = Convert(r);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->prompt_tokens, (std::vector<int32_t>{'h', 'i'}));
  EXPECT_EQ(p->sampling.temperature, 0.0f);
  EXPECT_EQ(p->sampling.top_k, 5);
  EXPECT_EQ(p->sampling.top_p, 0.5f);
  EXPECT_EQ(p->sampling.min_p, 0.1f);
  EXPECT_EQ(p->sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(p->sampling.presence_penalty, 0.2f);
  EXPECT_EQ(p->sampling.frequency_penalty, -0.3f);
  EXPECT_EQ(p->sampling.seed, 42u);
  EXPECT_EQ(p->sampling.logit_bias,  // ascending ids, whatever the map's order
            (std::vector<engine::TokenBias>{{7, 100.0f}, {31, 0.5f}, {200, -100.0f}}));
  EXPECT_EQ(p->stop.max_tokens, 7);
  EXPECT_EQ(p->stop.min_tokens, 2);
  EXPECT_TRUE(p->stop.ignore_eos);
  EXPECT_EQ(p->stop.stop_token_ids, (std::vector<int32_t>{3}));
  EXPECT_EQ(p->stop.stop_strings, (std::vector<std::string>{"END"}));
  EXPECT_FALSE(p->stop.skip_special_tokens);
  EXPECT_TRUE(p->return_logprobs);
  EXPECT_EQ(p->sampling.num_logprobs, 4);
  EXPECT_EQ(p->priority, -2);
  EXPECT_EQ(p->cache_salt, "tenant-a");
}

TEST_F(RequestConvertTest, BadInputNamesTheField) {
  auto base = [] {
    v1::GenerateRequest r;
    r.set_text("ok");
    return r;
  };
  EXPECT_NE(Error(v1::GenerateRequest()).find("prompt"), std::string::npos);
  v1::GenerateRequest r = base();
  r.set_text("");
  EXPECT_NE(Error(r).find("text: empty prompt"), std::string::npos);
  r = base();
  r.set_text(std::string("a\xff", 2));
  EXPECT_NE(Error(r).find("text: not valid UTF-8"), std::string::npos);
  r = base();
  r.mutable_token_ids();
  EXPECT_NE(Error(r).find("token_ids: empty prompt"), std::string::npos);
  r.mutable_token_ids()->add_ids(1);
  r.mutable_token_ids()->add_ids(258);
  EXPECT_NE(Error(r).find("token_ids.ids[1]: id 258 outside"), std::string::npos);
  r = base();
  r.set_logprobs(21);
  EXPECT_NE(Error(r).find("logprobs: must be in [0, 20]"), std::string::npos);
  r = base();
  for (int i = 0; i < kMaxStopStrings + 1; ++i) r.mutable_stopping()->add_stop("s");
  EXPECT_NE(Error(r).find("stopping.stop: at most 16"), std::string::npos);
  r = base();
  r.mutable_stopping()->add_stop("");
  EXPECT_NE(Error(r).find("stopping.stop[0]: empty"), std::string::npos);
  r = base();
  r.mutable_stopping()->add_stop(std::string(kMaxStopStringBytes + 1, 'x'));
  EXPECT_NE(Error(r).find("stopping.stop[0]: at most 256 bytes"), std::string::npos);
  r = base();
  r.mutable_stopping()->add_stop_token_ids(-1);
  EXPECT_NE(Error(r).find("stopping.stop_token_ids[0]"), std::string::npos);
  r = base();
  r.set_request_id(std::string(kMaxRequestIdBytes + 1, 'r'));
  EXPECT_NE(Error(r).find("request_id: at most 128"), std::string::npos);
  r = base();
  (*r.mutable_sampling()->mutable_logit_bias())[258] = 1.0f;
  EXPECT_NE(Error(r).find("sampling.logit_bias: token id 258 outside the vocabulary [0, 258)"),
            std::string::npos);
  r = base();
  (*r.mutable_sampling()->mutable_logit_bias())[-3] = 1.0f;
  EXPECT_NE(Error(r).find("sampling.logit_bias: token id -3 outside"), std::string::npos);
  r = base();
  (*r.mutable_sampling()->mutable_logit_bias())[4] = 100.5f;
  EXPECT_NE(Error(r).find("sampling.logit_bias: bias of token 4 must be in [-100, 100]"),
            std::string::npos);
  r = base();
  r.set_cache_salt(std::string("\xc3", 1));
  EXPECT_NE(Error(r).find("cache_salt: not valid UTF-8"), std::string::npos);
}

TEST_F(RequestConvertTest, TextPromptWithoutTokenizerIsInvalid) {
  v1::GenerateRequest r;
  r.set_text("hi");
  auto p = ToRequestParams(r, nullptr, kVocab);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("text: the model has no tokenizer"), std::string::npos);
}

TEST_F(RequestConvertTest, OutputsMergeIntoOneResponse) {
  scheduler::RequestOutput a;
  a.request_id = 9;
  a.token_ids = {1, 2};
  a.text = "ab";
  a.logprobs = {{.token = 1, .logprob = -0.5f, .top = {{1, -0.5f}, {2, -1.5f}}},
                {.token = 2, .logprob = -0.25f, .top = {}}};
  scheduler::RequestOutput b;
  b.request_id = 9;
  b.token_ids = {257};
  b.finished = true;
  b.finish_reason = scheduler::FinishReason::kStopToken;
  b.stop_token = 257;
  b.usage = {.prompt_tokens = 4, .cached_prompt_tokens = 2, .completion_tokens = 3};
  b.timings.e2e_s = 0.5;
  v1::GenerateResponse response;
  AppendOutput(a, &response);
  AppendOutput(b, &response);
  EXPECT_EQ(std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end()),
            (std::vector<int32_t>{1, 2, 257}));
  EXPECT_EQ(response.text(), "ab");
  ASSERT_EQ(response.logprobs_size(), 2);
  EXPECT_EQ(response.logprobs(0).top_size(), 2);
  EXPECT_EQ(response.logprobs(0).top(1).token_id(), 2);
  EXPECT_TRUE(response.finished());
  EXPECT_EQ(response.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(response.stop_token(), 257);
  EXPECT_FALSE(response.has_stop_string());
  EXPECT_EQ(response.usage().cached_prompt_tokens(), 2);
  EXPECT_EQ(response.timings().e2e_s(), 0.5);
}

TEST(FinalStatus, MapsFinishReasonsToCodes) {
  scheduler::RequestOutput out;
  out.finished = true;
  out.finish_reason = scheduler::FinishReason::kLength;
  EXPECT_TRUE(FinalStatus(out).ok());
  out.finish_reason = scheduler::FinishReason::kExpired;
  EXPECT_EQ(FinalStatus(out).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  out.finish_reason = scheduler::FinishReason::kAborted;
  EXPECT_EQ(FinalStatus(out).error_code(), grpc::StatusCode::UNAVAILABLE);
  out.finish_reason = scheduler::FinishReason::kError;
  out.status = absl::InternalError("boom");
  EXPECT_EQ(FinalStatus(out).error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(FinalStatus(out).error_message(), "boom");
}

}  // namespace
}  // namespace kvserve::server

namespace kvserve::server {
namespace {

// generation_config.json defaults fill exactly the sampling fields a request
// leaves unset; a field the request sets (even to the proto default) wins.
TEST(RequestConvertDefaultsTest, CheckpointDefaultsFillOnlyUnsetFields) {
  const auto tokenizer = engine::MakeByteTokenizer();
  engine::SamplingDefaults defaults;
  defaults.temperature = 0.6f;
  defaults.top_p = 0.9f;
  defaults.top_k = 20;
  defaults.min_p = 0.05f;
  defaults.repetition_penalty = 1.1f;

  v1::GenerateRequest unset;
  unset.set_text("hi");
  auto p = ToRequestParams(unset, tokenizer.get(), 258, defaults);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->sampling.temperature, 0.6f);
  EXPECT_EQ(p->sampling.top_p, 0.9f);
  EXPECT_EQ(p->sampling.top_k, 20);
  EXPECT_EQ(p->sampling.min_p, 0.05f);
  EXPECT_EQ(p->sampling.repetition_penalty, 1.1f);

  v1::GenerateRequest set = unset;
  set.mutable_sampling()->set_temperature(1.0f);  // the proto default, set explicitly
  set.mutable_sampling()->set_top_k(0);
  set.mutable_sampling()->set_min_p(0.0f);
  auto q = ToRequestParams(set, tokenizer.get(), 258, defaults);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->sampling.temperature, 1.0f);
  EXPECT_EQ(q->sampling.top_k, 0);
  EXPECT_EQ(q->sampling.min_p, 0.0f);
  EXPECT_EQ(q->sampling.top_p, 0.9f);               // still unset: the default
  EXPECT_EQ(q->sampling.repetition_penalty, 1.1f);  // still unset: the default

  auto none = ToRequestParams(unset, tokenizer.get(), 258, engine::SamplingDefaults{});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->sampling.temperature, 1.0f);
  EXPECT_EQ(none->sampling.top_k, 0);
}

}  // namespace
}  // namespace kvserve::server
