// The daemon through a C++ gRPC client: streamed tokens equal the engine's
// own output for the same request; cancelled streams leave nothing behind.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "engine/model.h"
#include "kvserve/v1/kvserve.grpc.pb.h"
#include "scheduler/engine_core.h"
#include "tests/integration/daemon_process.h"

namespace kvserve {
namespace {

using testing::DaemonProcess;
using testing::ParseMetrics;
using testing::ScrapeMetrics;

struct Streamed {
  std::vector<int32_t> token_ids;
  std::string text;
  v1::GenerateResponse final;
  int messages = 0;
  grpc::Status status;
};

Streamed Generate(v1::KvServe::Stub& stub, const v1::GenerateRequest& request) {
  grpc::ClientContext context;
  auto reader = stub.Generate(&context, request);
  Streamed out;
  v1::GenerateResponse message;
  while (reader->Read(&message)) {
    ++out.messages;
    out.token_ids.insert(out.token_ids.end(), message.token_ids().begin(),
                         message.token_ids().end());
    out.text += message.text();
    if (message.finished()) out.final = message;
  }
  out.status = reader->Finish();
  return out;
}

// The same request run by the engine in this process: the reference.
scheduler::OutputQueue::Collected EngineReference(const engine::Model& model,
                                                  scheduler::RequestParams params) {
  scheduler::EngineConfig config;
  config.num_blocks = 512;
  auto core = scheduler::EngineCore::ForModel(model, config);
  auto queue = scheduler::OutputQueue::Create();
  EXPECT_TRUE(core->AddRequest(1, std::move(params), queue->Callback()).ok());
  core->RunUntilIdle();
  return queue->Collect();
}

std::unique_ptr<v1::KvServe::Stub> Connect(const DaemonProcess& daemon) {
  return v1::KvServe::NewStub(
      grpc::CreateChannel(daemon.grpc_address(), grpc::InsecureChannelCredentials()));
}

TEST(GenerateStream, TokensEqualTheEnginesOutput) {
  auto model = engine::LoadModel("builtin:tiny");
  ASSERT_TRUE(model.ok());
  DaemonProcess daemon;
  auto stub = Connect(daemon);

  struct Case {
    std::string text;
    float temperature;
    uint64_t seed;
    int32_t max_tokens;
    bool ignore_eos;
  };
  const std::vector<Case> cases = {{"Hello, kvserve!", 0.0f, 0, 40, true},
                                   {"The quick brown fox", 0.9f, 7, 64, false},
                                   {"abc", 1.0f, 123, 200, false},
                                   {"zzz zz", 0.7f, 99, 25, true}};
  for (const Case& c : cases) {
    v1::GenerateRequest request;
    request.set_text(c.text);
    request.mutable_sampling()->set_temperature(c.temperature);
    request.mutable_sampling()->set_seed(c.seed);
    request.mutable_stopping()->set_max_tokens(c.max_tokens);
    request.mutable_stopping()->set_ignore_eos(c.ignore_eos);
    const Streamed got = Generate(*stub, request);
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();

    scheduler::RequestParams params;
    params.prompt_tokens = *(*model)->tokenizer->Encode(c.text, true);
    params.sampling.temperature = c.temperature;
    params.sampling.seed = c.seed;
    params.stop.max_tokens = c.max_tokens;
    params.stop.ignore_eos = c.ignore_eos;
    const auto want = EngineReference(**model, params);

    EXPECT_EQ(got.token_ids, want.token_ids) << c.text;
    EXPECT_EQ(got.text, want.text) << c.text;
    EXPECT_TRUE(got.final.finished());
    EXPECT_EQ(got.final.usage().prompt_tokens(), static_cast<int>(params.prompt_tokens.size()));
    EXPECT_EQ(got.final.usage().completion_tokens(), static_cast<int>(want.token_ids.size()));
    const bool stopped = want.final.finish_reason == scheduler::FinishReason::kStopToken;
    EXPECT_EQ(got.final.finish_reason(),
              stopped ? v1::FINISH_REASON_STOP : v1::FINISH_REASON_LENGTH);
    if (stopped) {
      EXPECT_EQ(got.final.stop_token(), want.token_ids.back());
    }
  }
  EXPECT_EQ(daemon.Stop(), 0);
}

TEST(GenerateStream, TokenIdPromptAndLogprobs) {
  DaemonProcess daemon;
  auto stub = Connect(daemon);
  v1::GenerateRequest request;
  for (int id : {256, 10, 20, 30, 40}) request.mutable_token_ids()->add_ids(id);
  request.mutable_sampling()->set_temperature(0);
  request.mutable_stopping()->set_max_tokens(12);
  request.mutable_stopping()->set_ignore_eos(true);
  request.set_logprobs(3);
  request.set_request_id("my-request");
  const Streamed got = Generate(*stub, request);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  ASSERT_EQ(got.token_ids.size(), 12u);
  EXPECT_EQ(got.final.request_id(), "my-request");
  EXPECT_EQ(got.final.usage().prompt_tokens(), 5);
  EXPECT_EQ(daemon.Stop(), 0);
  EXPECT_NE(daemon.StderrLog().find("request id=my-request"), std::string::npos);
}

// Waits until the metrics show an idle engine with no KV block in use.
std::map<std::string, double> WaitForIdle(const DaemonProcess& daemon) {
  std::map<std::string, double> m;
  for (int i = 0; i < 100; ++i) {  // safety net: 10 s
    m = ParseMetrics(ScrapeMetrics(daemon.metrics_address()));
    if (m["kvserve_num_requests_running"] == 0 && m["kvserve_num_requests_waiting"] == 0 &&
        m["kvserve_kv_cache_blocks{state=\"in_use\"}"] == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return m;
}

TEST(GenerateStream, TwoHundredCancelledStreamsLeaveNothingBehind) {
  DaemonProcess daemon({"--max_num_seqs=16", "--num_kv_blocks=2048"});
  auto stub = Connect(daemon);
  constexpr int kStreams = 200;
  constexpr int kThreads = 8;
  std::atomic<int> next{0}, cancelled{0}, finished_ok{0}, other{0}, reached{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      for (int i = next++; i < kStreams; i = next++) {
        v1::GenerateRequest request;
        request.set_text("cancel me " + std::to_string(i));
        request.mutable_stopping()->set_max_tokens(300);
        request.mutable_stopping()->set_ignore_eos(true);
        request.mutable_sampling()->set_seed(i);
        grpc::ClientContext context;
        auto reader = stub->Generate(&context, request);
        // Cancel at a random point: before the first message, or after 1..6.
        const int reads = std::uniform_int_distribution<int>(0, 6)(rng);
        v1::GenerateResponse message;
        int got = 0;
        while (got < reads && reader->Read(&message)) ++got;
        if (got > 0) ++reached;  // the server certainly has this one
        context.TryCancel();
        while (reader->Read(&message)) {
        }
        const grpc::Status status = reader->Finish();
        if (status.error_code() == grpc::StatusCode::CANCELLED) {
          ++cancelled;
        } else if (status.ok()) {
          ++finished_ok;  // finished before the cancel arrived
        } else {
          ++other;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(cancelled + finished_ok, kStreams);
  EXPECT_EQ(other, 0);
  EXPECT_GT(cancelled, kStreams / 2);

  auto m = WaitForIdle(daemon);
  EXPECT_EQ(m["kvserve_num_requests_running"], 0);
  EXPECT_EQ(m["kvserve_num_requests_waiting"], 0);
  EXPECT_EQ(m["kvserve_kv_cache_blocks{state=\"in_use\"}"], 0);
  EXPECT_EQ(m["kvserve_kv_cache_accounting_consistent"], 1);
  // Every stream the engine saw finished there, aborted or not. (A stream
  // cancelled before its first message may never have reached the server.)
  double finished = 0;
  for (const char* reason : {"stop", "length", "aborted", "deadline", "error"}) {
    finished +=
        m["kvserve_requests_finished_total{finished_reason=\"" + std::string(reason) + "\"}"];
  }
  EXPECT_GE(finished, reached.load());
  EXPECT_LE(finished, kStreams);
  // Each one was aborted or ran to its length. A stream can finish in the
  // engine just before its cancel lands (the client then sees CANCELLED), so
  // the streams that ended OK are at most the completed ones.
  const double aborted = m["kvserve_requests_finished_total{finished_reason=\"aborted\"}"];
  const double completed = m["kvserve_requests_finished_total{finished_reason=\"length\"}"];
  EXPECT_EQ(aborted + completed, finished);
  EXPECT_LE(finished_ok.load(), completed);

  // The daemon still serves.
  v1::GenerateRequest request;
  request.set_text("still there?");
  request.mutable_stopping()->set_max_tokens(5);
  request.mutable_stopping()->set_ignore_eos(true);
  const Streamed after = Generate(*stub, request);
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.token_ids.size(), 5u);
  EXPECT_EQ(daemon.Stop(), 0);
}

}  // namespace
}  // namespace kvserve
