// EngineLoop over the real tiny engine: concurrent Submit from several
// threads, outputs through OutputQueue, abort at every stage, queue limits
// and impossible requests at Submit, deadlines, Stop with requests
// outstanding, heartbeat and stats.
#include "scheduler/engine_loop.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/engine/engine_test_util.h"
#include "tests/unit/scheduler/scheduler_test_util.h"

namespace kvserve::scheduler {
namespace {

using namespace std::chrono_literals;

EngineConfig SmallConfig() {
  EngineConfig c;
  c.num_blocks = 64;
  c.block_size = 16;
  c.batch = {.max_num_batched_tokens = 256, .max_num_seqs = 32};
  c.hash_key = HashKey{3, 4};
  return c;
}

std::unique_ptr<EngineLoop> MakeLoop(const EngineConfig& c = SmallConfig()) {
  return std::make_unique<EngineLoop>(EngineCore::ForModel(engine::testing::TinyModel(), c));
}

RequestParams Params(uint32_t seed, int prompt_len, int max_tokens) {
  std::mt19937 rng(seed);
  RequestParams p = testing::Greedy(testing::RandomPrompt(rng, prompt_len, 256), max_tokens);
  p.stop.ignore_eos = true;
  return p;
}

// Waits (bounded) until pred holds on the loop's stats.
template <typename Pred>
bool WaitForStats(const EngineLoop& loop, Pred pred) {
  for (int i = 0; i < 5000; ++i) {
    if (pred(loop.Stats())) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

TEST(EngineLoopTest, ConcurrentSubmitMatchesSynchronousRuns) {
  // Reference: each request alone through EngineCore.
  std::vector<RequestParams> params;
  for (int i = 0; i < 12; ++i) params.push_back(Params(100 + i, 10 + 3 * i, 8 + i % 5));
  std::vector<std::vector<int32_t>> ref;
  for (const RequestParams& p : params) {
    auto core = EngineCore::ForModel(engine::testing::TinyModel(), SmallConfig());
    testing::Collector c;
    ASSERT_TRUE(core->AddRequest(1, p, c.For(1)).ok());
    core->RunUntilIdle();
    ref.push_back(c.results[1].tokens);
  }

  auto loop = MakeLoop();
  loop->Start();
  std::vector<std::shared_ptr<OutputQueue>> queues(params.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < params.size(); i += 3) {
        queues[i] = OutputQueue::Create();
        auto id = loop->Submit(params[i], queues[i]->Callback());
        EXPECT_TRUE(id.ok()) << id.status();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < params.size(); ++i) {
    const OutputQueue::Collected c = queues[i]->Collect();
    EXPECT_EQ(c.token_ids, ref[i]) << "request " << i;
    EXPECT_EQ(c.final.finish_reason, FinishReason::kLength);
    EXPECT_EQ(c.final.usage.prompt_tokens, static_cast<int32_t>(params[i].prompt_tokens.size()));
    EXPECT_EQ(c.final.usage.completion_tokens, static_cast<int32_t>(ref[i].size()));
    const Timings& t = c.final.timings;
    ASSERT_EQ(t.token_times_s.size(), ref[i].size());
    EXPECT_GE(t.time_to_first_token_s, t.queue_s);
    EXPECT_EQ(t.time_to_first_token_s, t.token_times_s.front());
    EXPECT_TRUE(std::is_sorted(t.token_times_s.begin(), t.token_times_s.end()));
    EXPECT_GE(t.e2e_s, t.token_times_s.back());
    EXPECT_EQ(c.num_messages, static_cast<int>(ref[i].size()));  // one per token
  }
  EXPECT_TRUE(WaitForStats(*loop, [](const SchedulerStats& s) { return s.num_running == 0; }));
  const SchedulerStats stats = loop->Stats();
  EXPECT_EQ(stats.kv.pool.num_in_use, 0);
  EXPECT_EQ(stats.finished[static_cast<int>(FinishReason::kLength)], 12);
  EXPECT_GT(stats.num_steps, 0);
  EXPECT_GT(stats.total_step_tokens, 0);
  EXPECT_GT(loop->LastStepTime().time_since_epoch().count(), 0);
  EXPECT_FALSE(loop->busy());
  // Idle: the loop sleeps; no step runs without work.
  const int64_t steps = stats.num_steps;
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(loop->Stats().num_steps, steps);
  loop->Stop();
}

TEST(EngineLoopTest, AbortAtEveryStageReturnsEveryBlock) {
  EngineConfig c = SmallConfig();
  c.batch.max_num_batched_tokens = 16;  // prompts take several steps
  auto loop = MakeLoop(c);
  // Waiting: aborted before the loop even starts.
  auto q1 = OutputQueue::Create();
  auto id1 = loop->Submit(Params(1, 40, 50), q1->Callback());
  ASSERT_TRUE(id1.ok());
  loop->Abort(*id1);
  loop->Start();
  RequestOutput o1 = q1->Pop();
  EXPECT_TRUE(o1.finished);
  EXPECT_EQ(o1.finish_reason, FinishReason::kAborted);
  EXPECT_EQ(o1.usage.completion_tokens, 0);

  // Running: after its first token. The engine thread is held inside the
  // first token's callback until the abort is queued, so the request cannot
  // run to completion first however the threads are scheduled.
  auto q2 = OutputQueue::Create();
  std::promise<void> abort_queued;
  std::shared_future<void> abort_queued_future = abort_queued.get_future().share();
  OutputCallback forward = q2->Callback();
  auto id2 = loop->Submit(Params(2, 40, 400), [&, forward, outputs = 0](RequestOutput&& out) mutable {
    forward(std::move(out));
    if (++outputs == 1) abort_queued_future.wait();
  });
  ASSERT_TRUE(id2.ok());
  RequestOutput first = q2->Pop();
  EXPECT_FALSE(first.finished);
  loop->Abort(*id2);
  abort_queued.set_value();
  OutputQueue::Collected rest = q2->Collect();
  EXPECT_EQ(rest.final.finish_reason, FinishReason::kAborted);
  // The abort is applied before the next step: no token after the first.
  EXPECT_EQ(rest.final.usage.completion_tokens, 1);

  // Just finished, unknown: no-ops.
  auto q3 = OutputQueue::Create();
  auto id3 = loop->Submit(Params(3, 5, 2), q3->Callback());
  ASSERT_TRUE(id3.ok());
  EXPECT_EQ(q3->Collect().final.finish_reason, FinishReason::kLength);
  loop->Abort(*id3);
  loop->Abort(12345);
  EXPECT_FALSE(q3->PopFor(20ms).has_value());

  EXPECT_TRUE(WaitForStats(*loop, [](const SchedulerStats& s) {
    return s.num_running == 0 && s.num_waiting == 0 && s.kv.pool.num_in_use == 0;
  }));
  EXPECT_EQ(loop->Stats().aborted[static_cast<int>(AbortCause::kClient)], 2);
  loop->Stop();
}

TEST(EngineLoopTest, AbortMidPrefillReturnsEveryBlock) {
  EngineConfig c = SmallConfig();
  c.batch.max_num_batched_tokens = 4;
  c.num_blocks = 140;
  auto loop = MakeLoop(c);
  loop->Start();
  // A short request decodes one token per step beside the long prompt's
  // prefill chunks. Its callbacks hold the engine thread at two points, so
  // the abort lands mid-prefill however the threads are scheduled: at its
  // first token until the long request is submitted, at its tenth until the
  // abort is queued (by then the long prompt has prefilled ~27 tokens of 1000).
  std::promise<void> long_submitted, paused, abort_queued;
  std::shared_future<void> long_submitted_f = long_submitted.get_future().share();
  std::shared_future<void> abort_queued_f = abort_queued.get_future().share();
  auto pacer_q = OutputQueue::Create();
  OutputCallback forward = pacer_q->Callback();
  auto pacer = loop->Submit(Params(8, 2, 20), [&, forward, outputs = 0](RequestOutput&& out) mutable {
    forward(std::move(out));
    ++outputs;
    if (outputs == 1) long_submitted_f.wait();
    if (outputs == 10) {
      paused.set_value();
      abort_queued_f.wait();
    }
  });
  ASSERT_TRUE(pacer.ok());
  auto q = OutputQueue::Create();
  auto id = loop->Submit(Params(9, 1000, 4), q->Callback());
  ASSERT_TRUE(id.ok());
  long_submitted.set_value();
  paused.get_future().wait();
  EXPECT_GT(loop->Stats().kv.pool.num_in_use, 2);  // both requests hold blocks
  loop->Abort(*id);
  abort_queued.set_value();
  const OutputQueue::Collected out = q->Collect();
  EXPECT_EQ(out.final.finish_reason, FinishReason::kAborted);
  EXPECT_TRUE(out.token_ids.empty());
  EXPECT_EQ(pacer_q->Collect().final.finish_reason, FinishReason::kLength);
  EXPECT_TRUE(
      WaitForStats(*loop, [](const SchedulerStats& s) { return s.kv.pool.num_in_use == 0; }));
  loop->Stop();
}

TEST(EngineLoopTest, SubmitRejectsImpossibleAndOverLimit) {
  EngineConfig c = SmallConfig();
  c.max_waiting_requests = 3;
  c.max_waiting_tokens = 100;
  auto loop = MakeLoop(c);  // not started: nothing leaves the queue
  auto q = OutputQueue::Create();
  EXPECT_TRUE(loop->Submit(Params(1, 30, 4), q->Callback()).ok());
  EXPECT_TRUE(loop->Submit(Params(2, 30, 4), q->Callback()).ok());
  // 30 + 30 + 41 > 100 tokens.
  EXPECT_EQ(loop->Submit(Params(3, 41, 4), q->Callback()).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(loop->Submit(Params(4, 40, 4), q->Callback()).ok());
  EXPECT_EQ(loop->Submit(Params(5, 1, 4), q->Callback()).status().code(),
            absl::StatusCode::kResourceExhausted);  // 3 requests waiting
  // Can never run: 2000 + 100 > the model length 2048; and 63 blocks x 16 < 1100.
  EXPECT_EQ(loop->Submit(Params(6, 2000, 100), q->Callback()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loop->Submit(Params(7, 1000, 100), q->Callback()).status().code(),
            absl::StatusCode::kInvalidArgument);
  RequestParams bad = Params(8, 4, 4);
  bad.sampling.temperature = -1;
  const absl::Status s = loop->Submit(bad, q->Callback()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("temperature"), std::string::npos) << s;
  const SchedulerStats stats = loop->Stats();
  EXPECT_EQ(stats.rejected[static_cast<int>(RejectReason::kQueueFullTokens)], 1);
  EXPECT_EQ(stats.rejected[static_cast<int>(RejectReason::kQueueFullRequests)], 1);
  EXPECT_EQ(stats.rejected[static_cast<int>(RejectReason::kInvalidArgument)], 3);

  // Once the queue drains, submissions are accepted again.
  loop->Start();
  int finished = 0;
  while (finished < 3) finished += q->Pop().finished ? 1 : 0;
  EXPECT_TRUE(WaitForStats(*loop, [](const SchedulerStats& s) { return s.num_waiting == 0; }));
  EXPECT_TRUE(loop->Submit(Params(9, 50, 4), q->Callback()).ok());
  loop->Stop();
}

TEST(EngineLoopTest, DeadlinePassedWhileWaitingExpires) {
  auto loop = MakeLoop();
  auto q = OutputQueue::Create();
  RequestParams p = Params(1, 20, 10);
  p.deadline = Clock::now() + 1ms;
  ASSERT_TRUE(loop->Submit(p, q->Callback()).ok());
  std::this_thread::sleep_for(5ms);
  loop->Start();
  const OutputQueue::Collected c = q->Collect();
  EXPECT_EQ(c.final.finish_reason, FinishReason::kExpired);
  EXPECT_EQ(c.final.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(c.token_ids.empty());
  loop->Stop();
  EXPECT_EQ(loop->Stats().aborted[static_cast<int>(AbortCause::kDeadlineWaiting)], 1);
}

TEST(EngineLoopTest, StopFinishesOutstandingRequestsAsAborted) {
  auto loop = MakeLoop();
  loop->Start();
  std::vector<std::shared_ptr<OutputQueue>> queues;
  for (int i = 0; i < 6; ++i) {
    queues.push_back(OutputQueue::Create());
    ASSERT_TRUE(loop->Submit(Params(i, 30, 1000 - 30), queues.back()->Callback()).ok());
  }
  queues[0]->Pop();  // something is running
  loop->Stop();
  for (auto& q : queues) {
    EXPECT_EQ(q->Collect().final.finish_reason, FinishReason::kAborted);
  }
  EXPECT_EQ(loop->Submit(Params(9, 5, 5), nullptr).status().code(), absl::StatusCode::kUnavailable);
  const SchedulerStats stats = loop->Stats();
  EXPECT_EQ(stats.aborted[static_cast<int>(AbortCause::kShutdown)], 6);
  EXPECT_EQ(stats.kv.pool.num_in_use, 0);
  EXPECT_EQ(stats.rejected[static_cast<int>(RejectReason::kShuttingDown)], 1);
  loop->Stop();  // idempotent
}

TEST(EngineLoopTest, ThreadsSubmitAndAbortAtRandom) {
  EngineConfig c = SmallConfig();
  c.num_blocks = 24;  // 23 blocks of 16 for up to 100 requests: preemption
  c.batch.max_num_batched_tokens = 64;
  auto loop = MakeLoop(c);
  loop->Start();
  constexpr int kThreads = 4, kPerThread = 25;
  std::vector<std::shared_ptr<OutputQueue>> queues(kThreads * kPerThread);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kPerThread; ++i) {
        auto& q = queues[t * kPerThread + i];
        q = OutputQueue::Create();
        auto id = loop->Submit(Params(rng(), 10 + rng() % 80, 1 + rng() % 60), q->Callback());
        ASSERT_TRUE(id.ok()) << id.status();
        if (rng() % 3 == 0) {
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
          loop->Abort(*id);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  int aborted = 0;
  for (auto& q : queues) {
    const OutputQueue::Collected out = q->Collect();
    EXPECT_TRUE(out.final.finish_reason == FinishReason::kLength ||
                out.final.finish_reason == FinishReason::kAborted)
        << FinishReasonName(out.final.finish_reason);
    aborted += out.final.finish_reason == FinishReason::kAborted ? 1 : 0;
    EXPECT_EQ(out.final.usage.completion_tokens, static_cast<int32_t>(out.token_ids.size()));
    EXPECT_FALSE(q->PopFor(0ms).has_value());  // nothing after the final message
  }
  EXPECT_TRUE(WaitForStats(*loop, [](const SchedulerStats& s) {
    return s.num_running == 0 && s.num_waiting == 0 && s.kv.pool.num_in_use == 0;
  }));
  const SchedulerStats stats = loop->Stats();
  EXPECT_EQ(stats.aborted[static_cast<int>(AbortCause::kClient)], aborted);
  loop->Stop();
}

TEST(EngineLoopTest, StopWithoutStartStillFinishesRequests) {
  auto loop = MakeLoop();
  auto q = OutputQueue::Create();
  ASSERT_TRUE(loop->Submit(Params(1, 10, 10), q->Callback()).ok());
  loop.reset();  // destructor stops
  EXPECT_EQ(q->Collect().final.finish_reason, FinishReason::kAborted);
}

}  // namespace
}  // namespace kvserve::scheduler
