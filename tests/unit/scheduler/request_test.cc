// Request state machine: transitions, token regions, the thrash guard, usage.
#include "scheduler/request.h"

#include <vector>

#include "gtest/gtest.h"

namespace kvserve::scheduler {
namespace {

Request MakeRequest(std::vector<int32_t> prompt, int32_t max_tokens) {
  RequestParams p;
  p.prompt_tokens = std::move(prompt);
  p.stop.max_tokens = max_tokens;
  const std::vector<int32_t> eos = {99};
  return Request(7, std::move(p), nullptr, TimePoint{}, 0, eos, nullptr);
}

TEST(RequestTest, LifecycleWithPreemption) {
  Request r = MakeRequest({1, 2, 3, 4, 5}, 4);
  EXPECT_EQ(r.state(), RequestState::kWaiting);
  EXPECT_EQ(r.num_tokens(), 5);
  EXPECT_FALSE(r.protected_from_preemption());

  r.Admit(/*num_cached_tokens=*/4, TimePoint{} + std::chrono::seconds(1));
  EXPECT_EQ(r.state(), RequestState::kRunning);
  EXPECT_EQ(r.num_computed_tokens(), 4);
  r.AdvanceComputed(1);
  r.AppendOutput(42, TimePoint{} + std::chrono::seconds(2));
  EXPECT_EQ(r.num_tokens(), 6);
  EXPECT_EQ(r.num_output_tokens(), 1);
  EXPECT_EQ(r.output()[0], 42);

  r.Preempt();  // K/V dropped, tokens kept
  EXPECT_EQ(r.state(), RequestState::kWaiting);
  EXPECT_EQ(r.num_computed_tokens(), 0);
  EXPECT_EQ(r.num_tokens(), 6);
  EXPECT_EQ(r.num_preemptions(), 1);

  // Resumed: protected until it samples a new token.
  r.Admit(0, TimePoint{} + std::chrono::seconds(3));
  EXPECT_TRUE(r.protected_from_preemption());
  r.AdvanceComputed(6);
  EXPECT_TRUE(r.protected_from_preemption());  // recompute is not progress
  r.AppendOutput(43, TimePoint{} + std::chrono::seconds(4));
  EXPECT_FALSE(r.protected_from_preemption());

  r.Finish(FinishReason::kLength, TimePoint{} + std::chrono::seconds(5));
  EXPECT_EQ(r.state(), RequestState::kFinished);
  const Usage u = r.MakeUsage();
  EXPECT_EQ(u.prompt_tokens, 5);
  EXPECT_EQ(u.cached_prompt_tokens, 4);  // the first admission's
  EXPECT_EQ(u.completion_tokens, 2);
  const Timings t = r.MakeTimings();
  EXPECT_EQ(t.queue_s, 1.0);
  EXPECT_EQ(t.time_to_first_token_s, 2.0);
  EXPECT_EQ(t.e2e_s, 5.0);
  EXPECT_EQ(t.token_times_s, (std::vector<double>{2.0, 4.0}));
}

TEST(RequestDeathTest, InvalidTransitionsAreBugs) {
  EXPECT_DEATH(
      {
        Request r = MakeRequest({1, 2}, 2);
        r.Preempt();  // WAITING cannot be preempted
      },
      "state_ == RequestState::kRunning");
  EXPECT_DEATH(
      {
        Request r = MakeRequest({1, 2}, 2);
        r.Admit(2, TimePoint{});  // the last token is always computed
      },
      "num_cached_tokens < num_tokens");
  EXPECT_DEATH(
      {
        Request r = MakeRequest({1, 2}, 2);
        r.Finish(FinishReason::kAborted, TimePoint{});
        r.Finish(FinishReason::kAborted, TimePoint{});
      },
      "state_ != RequestState::kFinished");
}

}  // namespace
}  // namespace kvserve::scheduler
