// Structured outputs through the real CPU engine (builtin:tiny: random
// weights, the byte tokenizer, so its unconstrained text is noise): the
// output always matches the constraint, the request finishes as kStopToken
// when the grammar is complete, a grammar that fails to compile rejects its
// request alone, and a constrained request's tokens are the same alone as in
// a batch with other requests, with preemption and chunked prefills.
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/engine_core.h"
#include "tests/unit/engine/engine_test_util.h"
#include "tests/unit/grammar/constraint_builders.h"
#include "tests/unit/scheduler/scheduler_test_util.h"

namespace kvserve::scheduler {
namespace {

using engine::grammar::Constraint;
using engine::grammar::ConstraintKind;
using testing::Collector;

EngineConfig Config(int32_t num_blocks, int32_t budget) {
  EngineConfig c;
  c.num_blocks = num_blocks;
  c.block_size = 16;
  c.batch = {.max_num_batched_tokens = budget, .max_num_seqs = 64};
  c.hash_key = HashKey{3, 3};
  return c;
}

RequestParams Params(std::mt19937& rng, int i, std::optional<Constraint> constraint) {
  RequestParams p;
  p.prompt_tokens = testing::RandomPrompt(rng, 5 + i % 17, 256);
  p.sampling = testing::VariedSampling(i, 500);
  p.return_logprobs = p.sampling.num_logprobs > 0;
  p.stop.max_tokens = 48;
  p.constraint = std::move(constraint);
  return p;
}

using engine::grammar::test_constraints::Choice;
using engine::grammar::test_constraints::Regex;

Constraint Schema() {
  return engine::grammar::test_constraints::Schema(R"({"type": "object", "properties": {
      "color": {"enum": ["red", "green", "blue"]},
      "n": {"type": "integer", "minimum": 0, "maximum": 99},
      "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}},
    "required": ["color", "n", "tags"], "additionalProperties": false})");
}

constexpr char kRegex[] = "(yes|no)-[0-9]{2}";

// Request i: every third unconstrained, the others cycling through a
// choice, a regex and a JSON schema.
std::vector<RequestParams> Jobs(int n) {
  std::mt19937 rng(17);
  std::vector<RequestParams> jobs;
  for (int i = 0; i < n; ++i) {
    std::optional<Constraint> c;
    switch (i % 4) {
      case 1:
        c = Choice({"alpha", "beta", "gamma delta"});
        break;
      case 2:
        c = Regex(kRegex);
        break;
      case 3:
        c = Schema();
        break;
      default:
        break;
    }
    jobs.push_back(Params(rng, i, std::move(c)));
  }
  return jobs;
}

void CheckMatches(const RequestParams& p, const Collector::Result& r, int i) {
  ASSERT_TRUE(r.finished) << i;
  ASSERT_TRUE(r.final.status.ok()) << i << ": " << r.final.status;
  if (!p.constraint) return;
  // Every grammar here is finite and short: it ends before max_tokens.
  EXPECT_EQ(r.final.finish_reason, FinishReason::kStopToken) << i << ": " << r.text;
  switch (p.constraint->kind) {
    case ConstraintKind::kChoice: {
      const auto& cs = p.constraint->choices;
      EXPECT_NE(std::find(cs.begin(), cs.end(), r.text), cs.end()) << i << ": " << r.text;
      break;
    }
    case ConstraintKind::kRegex:
      EXPECT_TRUE(std::regex_match(r.text, std::regex(kRegex))) << i << ": " << r.text;
      break;
    case ConstraintKind::kJsonSchema: {
      const nlohmann::json j = nlohmann::json::parse(r.text, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(j.is_object()) << i << ": " << r.text;
      EXPECT_EQ(j.size(), 3u) << r.text;
      EXPECT_TRUE(j["color"] == "red" || j["color"] == "green" || j["color"] == "blue") << r.text;
      ASSERT_TRUE(j["n"].is_number_integer()) << r.text;
      EXPECT_GE(j["n"].get<int>(), 0);
      EXPECT_LE(j["n"].get<int>(), 99);
      ASSERT_TRUE(j["tags"].is_array()) << r.text;
      EXPECT_LE(j["tags"].size(), 3u);
      for (const auto& t : j["tags"]) EXPECT_TRUE(t.is_boolean()) << r.text;
      break;
    }
    default:
      break;
  }
}

std::map<RequestId, Collector::Result> RunAlone(const std::vector<RequestParams>& jobs) {
  auto core = EngineCore::ForModel(engine::testing::TinyModel(), Config(256, 2048));
  Collector collector;
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_TRUE(core->AddRequest(static_cast<RequestId>(i), jobs[i], collector.For(i)).ok());
    core->RunUntilIdle();
  }
  return std::move(collector.results);
}

TEST(StructuredOutputTest, OutputMatchesTheConstraintAndFinishesAsStop) {
  const std::vector<RequestParams> jobs = Jobs(16);
  const auto results = RunAlone(jobs);
  ASSERT_EQ(results.size(), jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) CheckMatches(jobs[i], results.at(i), i);
}

TEST(StructuredOutputTest, TokensDoNotDependOnTheBatchPreemptionOrChunking) {
  const std::vector<RequestParams> jobs = Jobs(24);
  const auto alone = RunAlone(jobs);
  // All at once in a pool small enough to preempt, with a budget that
  // chunks prefills.
  auto core = EngineCore::ForModel(engine::testing::TinyModel(), Config(14, 16));
  Collector collector;
  for (size_t i = 0; i < jobs.size(); ++i) {
    ASSERT_TRUE(core->AddRequest(static_cast<RequestId>(i), jobs[i], collector.For(i)).ok());
  }
  core->RunUntilIdle();
  EXPECT_GT(core->Stats().num_preemptions, 0);
  EXPECT_EQ(core->Stats().structured_requests, 18);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Collector::Result& got = collector.results.at(i);
    CheckMatches(jobs[i], got, i);
    EXPECT_EQ(got.tokens, alone.at(i).tokens) << i;
    EXPECT_EQ(got.text, alone.at(i).text) << i;
  }
}

TEST(StructuredOutputTest, AGrammarThatFailsToCompileRejectsOnlyItsRequest) {
  auto core = EngineCore::ForModel(engine::testing::TinyModel(), Config(64, 2048));
  Collector collector;
  std::mt19937 rng(1);
  Constraint bad;
  bad.kind = ConstraintKind::kGrammar;
  bad.text = "root ::= missing_rule";
  ASSERT_TRUE(core->AddRequest(1, Params(rng, 0, std::nullopt), collector.For(1)).ok());
  ASSERT_TRUE(core->AddRequest(2, Params(rng, 1, bad), collector.For(2)).ok());
  core->RunUntilIdle();
  const Collector::Result& failed = collector.results.at(2);
  ASSERT_TRUE(failed.finished);
  EXPECT_EQ(failed.final.finish_reason, FinishReason::kRejected);
  EXPECT_EQ(failed.final.status.code(), absl::StatusCode::kInvalidArgument) << failed.final.status;
  EXPECT_TRUE(failed.tokens.empty());
  EXPECT_TRUE(collector.results.at(1).finished);
  EXPECT_TRUE(collector.results.at(1).final.status.ok());
  EXPECT_EQ(core->kv().pool().Stats().num_in_use, 0);
}

TEST(StructuredOutputTest, IgnoreEosStillEndsWhenTheGrammarIsComplete) {
  auto core = EngineCore::ForModel(engine::testing::TinyModel(), Config(64, 2048));
  Collector collector;
  std::mt19937 rng(2);
  RequestParams p = Params(rng, 1, Choice({"ok"}));
  p.stop.ignore_eos = true;
  ASSERT_TRUE(core->AddRequest(1, p, collector.For(1)).ok());
  core->RunUntilIdle();
  const Collector::Result& r = collector.results.at(1);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.text, "ok");
  EXPECT_EQ(r.final.finish_reason, FinishReason::kStopToken);
  EXPECT_EQ(r.tokens.size(), 3u);  // 'o', 'k', <eos>
}

TEST(StructuredOutputTest, AbortWhileWaitingForTheGrammarFreesTheRequest) {
  auto core = EngineCore::ForModel(engine::testing::TinyModel(), Config(64, 2048));
  Collector collector;
  std::mt19937 rng(3);
  ASSERT_TRUE(core->AddRequest(1, Params(rng, 3, Schema()), collector.For(1)).ok());
  core->Abort(1);  // before any step: still waiting for (or just given) its grammar
  EXPECT_FALSE(core->HasUnfinished());
  ASSERT_TRUE(collector.results.at(1).finished);
  EXPECT_EQ(collector.results.at(1).final.finish_reason, FinishReason::kAborted);
}

}  // namespace
}  // namespace kvserve::scheduler
