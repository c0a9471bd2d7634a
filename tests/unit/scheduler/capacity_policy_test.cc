// CapacityPolicy: exact decisions for small inputs.
#include "scheduler/capacity_policy.h"

#include <vector>

#include "gtest/gtest.h"

namespace kvserve::scheduler {
namespace {

CapacityLimits Limits() {
  return CapacityLimits{.max_model_len = 64,
                        .num_usable_blocks = 7,
                        .block_size = 4,
                        .vocab_size = 100,
                        .has_tokenizer = true,
                        .max_waiting_requests = 3,
                        .max_waiting_tokens = 40};
}

RequestParams Params(int prompt_len, int max_tokens) {
  RequestParams p;
  p.prompt_tokens.assign(prompt_len, 5);
  p.stop.max_tokens = max_tokens;
  return p;
}

TEST(CapacityPolicyTest, AcceptsWhatFits) {
  CapacityPolicy policy(Limits());
  // 7 blocks of 4 = 28 slots; prompt + max_tokens - 1 slots are ever needed.
  EXPECT_TRUE(policy.CheckSubmission(Params(20, 9)).ok());
  EXPECT_EQ(policy.MaxBlocksNeeded(Params(20, 9)), 7);
  EXPECT_EQ(policy.MaxBlocksNeeded(Params(1, 1)), 1);
  EXPECT_EQ(policy.MaxBlocksNeeded(Params(4, 1)), 1);
  EXPECT_EQ(policy.MaxBlocksNeeded(Params(4, 2)), 2);
}

TEST(CapacityPolicyTest, RejectsWhatCanNeverRun) {
  CapacityPolicy policy(Limits());
  auto code = [&](const RequestParams& p) { return policy.CheckSubmission(p).code(); };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(Params(0, 4)), kInvalid);                // empty prompt
  EXPECT_EQ(code(Params(20, 10)), kInvalid);              // 29 slots > 28: more than the pool
  EXPECT_EQ(code(Params(4, -1)), kInvalid);               // max_tokens < 0
  EXPECT_EQ(code(Params(28, 0)), absl::StatusCode::kOk);  // max_tokens 0: the prompt's 28 slots
  EXPECT_EQ(code(Params(29, 0)), kInvalid);               // 29 slots
  RequestParams scored = Params(4, 4);
  scored.num_prompt_logprobs = 21;
  EXPECT_EQ(code(scored), kInvalid);  // more top entries than kMaxLogprobs
  scored.num_prompt_logprobs = 20;
  EXPECT_EQ(code(scored), absl::StatusCode::kOk);
  RequestParams p = Params(4, 4);
  p.stop.min_tokens = 5;
  EXPECT_EQ(code(p), kInvalid);  // min_tokens > max_tokens
  p = Params(4, 4);
  p.prompt_tokens[2] = 100;
  EXPECT_EQ(code(p), kInvalid);  // outside the vocabulary
  EXPECT_NE(policy.CheckSubmission(p).message().find("prompt_tokens[2]"), std::string::npos);
  p = Params(4, 4);
  p.sampling.top_p = 0.0f;
  EXPECT_EQ(code(p), kInvalid);
  p = Params(4, 4);
  p.stop.stop_strings = {""};
  EXPECT_EQ(code(p), kInvalid);
  p = Params(4, 4);
  p.stop.stop_token_ids = {-1};
  EXPECT_EQ(code(p), kInvalid);

  CapacityLimits l = Limits();
  l.num_usable_blocks = 100;
  CapacityPolicy long_pool(l);
  EXPECT_EQ(long_pool.CheckSubmission(Params(60, 5)).code(), kInvalid);  // 65 > model length 64
  EXPECT_TRUE(long_pool.CheckSubmission(Params(39, 25)).ok());
  EXPECT_EQ(long_pool.CheckSubmission(Params(41, 5)).code(), kInvalid);  // over the token limit
  l.has_tokenizer = false;
  p = Params(4, 4);
  p.stop.stop_strings = {"x"};
  EXPECT_EQ(CapacityPolicy(l).CheckSubmission(p).code(), kInvalid);
}

TEST(CapacityPolicyTest, LogitBiasIdsAndDeviceSamplers) {
  CapacityPolicy policy(Limits());
  RequestParams p = Params(4, 4);
  p.sampling.logit_bias = {{3, 1.0f}, {99, -100.0f}};
  EXPECT_TRUE(policy.CheckSubmission(p).ok());
  p.sampling.logit_bias = {{3, 1.0f}, {100, 1.0f}};
  const absl::Status outside = policy.CheckSubmission(p);
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(outside.message().find("logit_bias: token id 100 outside the vocabulary"),
            std::string::npos)
      << outside;
  p.sampling.logit_bias = {{3, 101.0f}};
  EXPECT_EQ(policy.CheckSubmission(p).code(), absl::StatusCode::kInvalidArgument);
  // A runner that samples on its device does not apply logit_bias.
  CapacityLimits l = Limits();
  l.supports_logit_bias = false;
  p.sampling.logit_bias = {{3, 1.0f}};
  const absl::Status device = CapacityPolicy(l).CheckSubmission(p);
  EXPECT_EQ(device.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(device.message().find("logit_bias"), std::string::npos) << device;
  p.sampling.logit_bias.clear();
  EXPECT_TRUE(CapacityPolicy(l).CheckSubmission(p).ok());
}

TEST(CapacityPolicyTest, QueueLimits) {
  CapacityPolicy policy(Limits());
  RejectReason reason{};
  EXPECT_TRUE(policy.CheckQueueLimits(2, 30, 10, &reason).ok());
  absl::Status s = policy.CheckQueueLimits(3, 0, 1, &reason);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(reason, RejectReason::kQueueFullRequests);
  s = policy.CheckQueueLimits(1, 31, 10, &reason);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(reason, RejectReason::kQueueFullTokens);
}

TEST(CapacityPolicyTest, ServiceOrder) {
  // Lower priority value first, then earlier arrival.
  EXPECT_TRUE(CapacityPolicy::ServedBefore(0, 5, 1, 1));
  EXPECT_TRUE(CapacityPolicy::ServedBefore(-3, 9, 0, 0));
  EXPECT_TRUE(CapacityPolicy::ServedBefore(2, 1, 2, 2));
  EXPECT_FALSE(CapacityPolicy::ServedBefore(2, 2, 2, 2));
}

TEST(CapacityPolicyTest, VictimIsLowestPriorityThenLatest) {
  std::vector<VictimCandidate> c = {{.priority = 0, .arrival_seq = 1},
                                    {.priority = 1, .arrival_seq = 2},
                                    {.priority = 1, .arrival_seq = 7},
                                    {.priority = 0, .arrival_seq = 9}};
  EXPECT_EQ(CapacityPolicy::PickVictim(c), 2u);  // priority 1, latest
  c[2].priority = 0;
  EXPECT_EQ(CapacityPolicy::PickVictim(c), 1u);
  c[1].priority = -1;
  EXPECT_EQ(CapacityPolicy::PickVictim(c), 3u);  // all 0 but #1: latest arrival
  EXPECT_EQ(CapacityPolicy::PickVictim({}), std::nullopt);
}

TEST(CapacityPolicyTest, ThrashGuardWithinPriorityClass) {
  std::vector<VictimCandidate> c = {{.priority = 0, .arrival_seq = 1},
                                    {.priority = 0, .arrival_seq = 5, .is_protected = true},
                                    {.priority = 0, .arrival_seq = 3}};
  // The latest (5) was just resumed: the next latest unprotected goes.
  EXPECT_EQ(CapacityPolicy::PickVictim(c), 2u);
  c[0].is_protected = c[2].is_protected = true;
  EXPECT_EQ(CapacityPolicy::PickVictim(c), 1u);  // all protected: latest
  // Priority beats the guard: a protected lower-priority request goes first.
  c = {{.priority = 0, .arrival_seq = 1}, {.priority = 2, .arrival_seq = 0, .is_protected = true}};
  EXPECT_EQ(CapacityPolicy::PickVictim(c), 1u);
}

}  // namespace
}  // namespace kvserve::scheduler
