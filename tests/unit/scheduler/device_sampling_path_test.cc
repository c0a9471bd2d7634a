// The scheduler's path for runners that sample on their device
// (StepRunner::SamplesOnDevice, StepInput::sample_specs, StepOutput::samples)
// gives exactly the outputs of the host-sampling path. The "device" here is a
// fake: a runner that computes logits with the CPU ModelRunner and samples
// each row from its SampleSpec alone (mask, params, prompt and output spans)
// — so any field the scheduler forgets or fills wrongly (a stale output span,
// a missing min_tokens mask, a missing grammar mask, rows out of order)
// changes the tokens.
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/engine_core.h"
#include "tests/unit/engine/engine_test_util.h"
#include "tests/unit/scheduler/scheduler_test_util.h"

namespace kvserve::scheduler {
namespace {

using testing::Collector;

class SpecSamplingRunner final : public StepRunner {
 public:
  SpecSamplingRunner(const engine::Model& model, const engine::RunnerOptions& options)
      : runner_(model, options) {}

  absl::StatusOr<engine::StepOutput> Step(const engine::StepInput& input) override {
    EXPECT_EQ(input.sample_specs.size(), input.logits_indices.size());
    engine::StepInput logits_only = input;
    logits_only.sample_specs.clear();
    auto out = runner_.Step(logits_only);
    if (!out.ok()) return out;
    for (size_t r = 0; r < input.sample_specs.size(); ++r) {
      const engine::SampleSpec& spec = input.sample_specs[r];
      const auto row = out->row(r);
      std::vector<float> masked(row.begin(), row.end());
      for (int32_t t : spec.masked_tokens) masked[t] = -std::numeric_limits<float>::infinity();
      out->samples.push_back(
          engine::Sample(masked, spec.params, spec.prompt_tokens, spec.output_tokens));
      ++rows_sampled_;
    }
    out->logits.clear();  // a device runner returns no logits
    return out;
  }
  bool SamplesOnDevice() const override { return true; }
  static inline int64_t rows_sampled_ = 0;

 private:
  engine::ModelRunner runner_;
};

std::vector<RequestParams> MakeRequests() {
  std::mt19937 rng(5);
  std::vector<RequestParams> requests;
  for (int i = 0; i < 12; ++i) {
    RequestParams p;
    p.prompt_tokens = testing::RandomPrompt(rng, 5 + 7 * i, 256);
    p.stop.max_tokens = 6 + i;
    p.stop.stop_token_ids = {static_cast<int32_t>(i * 17 % 256)};
    if (i % 3 == 0) {
      // Half the vocabulary stops, but not before 4 outputs: without the
      // min_tokens mask these requests would stop at once.
      p.stop.min_tokens = 4;
      for (int32_t t = 0; t < 128; ++t) p.stop.stop_token_ids.push_back(t);
    }
    if (i % 2 == 1 && i % 3 != 0) {
      // Structured output: the device gets the grammar's mask as masked ids.
      p.constraint = engine::grammar::Constraint{.kind = engine::grammar::ConstraintKind::kRegex,
                                                 .text = "[0-9]{3}"};
    }
    p.return_logprobs = i % 2 == 0;
    p.sampling = testing::VariedSampling(i, 77);
    requests.push_back(std::move(p));
  }
  return requests;
}

std::map<RequestId, Collector::Result> RunRequests(std::unique_ptr<StepRunner> runner) {
  EngineConfig config;
  config.num_blocks = 128;
  config.block_size = 8;
  config.batch = {.max_num_batched_tokens = 48, .max_num_seqs = 8};  // chunked prefills
  config.hash_key = HashKey{3, 3};
  const engine::Model& model = engine::testing::TinyModel();
  EngineCore core(config, ModelInfoOf(model), std::move(runner));
  Collector collector;
  const std::vector<RequestParams> requests = MakeRequests();
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_TRUE(core.AddRequest(static_cast<RequestId>(i), requests[i],
                                collector.For(static_cast<RequestId>(i)))
                    .ok());
  }
  core.RunUntilIdle();
  EXPECT_TRUE(core.last_step_error().ok()) << core.last_step_error();
  return std::move(collector.results);
}

TEST(DeviceSamplingPath, SameOutputsAsHostSampling) {
  const engine::Model& model = engine::testing::TinyModel();
  const engine::RunnerOptions options{.num_blocks = 128, .block_size = 8};
  const auto host = RunRequests(std::make_unique<engine::ModelRunner>(model, options));
  SpecSamplingRunner::rows_sampled_ = 0;
  const auto device = RunRequests(std::make_unique<SpecSamplingRunner>(model, options));
  EXPECT_GT(SpecSamplingRunner::rows_sampled_, 0);
  ASSERT_EQ(host.size(), 12u);
  ASSERT_EQ(device.size(), host.size());
  for (const auto& [id, h] : host) {
    const Collector::Result& d = device.at(id);
    ASSERT_TRUE(h.finished && d.finished) << id;
    EXPECT_EQ(d.tokens, h.tokens) << "request " << id;
    EXPECT_EQ(d.text, h.text) << "request " << id;
    EXPECT_EQ(d.final.finish_reason, h.final.finish_reason) << "request " << id;
    if (id % 2 == 1 && id % 3 != 0) {
      EXPECT_EQ(d.text.size(), 3u) << d.text;
      for (char c : d.text) EXPECT_TRUE(c >= '0' && c <= '9') << d.text;
      EXPECT_EQ(d.final.finish_reason, FinishReason::kStopToken) << d.text;
    }
  }
}

// The device sampler does not apply logit_bias: such a request is refused at
// submission, naming the field, rather than served without its bias.
TEST(DeviceSamplingPath, LogitBiasIsRefusedByName) {
  const engine::Model& model = engine::testing::TinyModel();
  const engine::RunnerOptions options{.num_blocks = 32, .block_size = 8};
  EngineConfig config;
  config.num_blocks = 32;
  config.block_size = 8;
  RequestParams p;
  p.prompt_tokens = {1, 2, 3};
  p.stop.max_tokens = 2;
  p.sampling.logit_bias = {{5, 100.0f}};
  Collector collector;
  EngineCore device(config, ModelInfoOf(model),
                    std::make_unique<SpecSamplingRunner>(model, options));
  const absl::Status refused = device.AddRequest(1, p, collector.For(1));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("logit_bias"), std::string::npos) << refused;
  EngineCore host(config, ModelInfoOf(model),
                  std::make_unique<engine::ModelRunner>(model, options));
  ASSERT_TRUE(host.AddRequest(2, p, collector.For(2)).ok());
  host.RunUntilIdle();
  EXPECT_EQ(collector.results.at(2).tokens, (std::vector<int32_t>{5, 5}));  // +100 forces it
}

}  // namespace
}  // namespace kvserve::scheduler
