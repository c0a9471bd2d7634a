// ModelRunner rejects ill-formed steps with a message instead of reading or
// writing outside the cache.
#include "engine/builtin_models.h"
#include "gmock/gmock.h"
#include "tests/unit/engine/engine_test_util.h"

namespace kvserve::engine::testing {
namespace {

using ::testing::HasSubstr;

StepInput OneSequence(std::vector<int32_t> tokens, std::vector<int32_t> table) {
  StepInput in;
  in.AddSequence(tokens, 0, table, 16, StepInput::Logits::kLast);
  return in;
}

TEST(RunnerValidationTest, RejectsTokenOutsideVocabulary) {
  ModelRunner runner(TinyModel(), {.num_blocks = 8, .block_size = 16});
  auto out = runner.Step(OneSequence({1, 2, 258}, {3}));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("outside the vocabulary"));
}

TEST(RunnerValidationTest, RejectsBlockOutsideCache) {
  ModelRunner runner(TinyModel(), {.num_blocks = 8, .block_size = 16});
  auto out = runner.Step(OneSequence({1, 2}, {8}));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("block id 8"));
}

TEST(RunnerValidationTest, RejectsPositionPastBlockTable) {
  ModelRunner runner(TinyModel(), {.num_blocks = 8, .block_size = 16});
  std::vector<int32_t> tokens(17, 5);
  auto out = runner.Step(OneSequence(tokens, {2}));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("past its block table"));
}

TEST(RunnerValidationTest, RejectsSlotNotMatchingTable) {
  ModelRunner runner(TinyModel(), {.num_blocks = 8, .block_size = 16});
  StepInput in = OneSequence({1, 2}, {3});
  in.slot_mapping[1] = 5;
  auto out = runner.Step(in);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("not the block table's slot"));
}

TEST(RunnerValidationTest, BuiltinSmallHasAboutOneHundredMillionParameters) {
  auto config = BuiltinModelConfig("small");
  ASSERT_TRUE(config.ok());
  const auto& c = *config;
  const int64_t per_layer = c.hidden_size * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim +
                            c.num_heads * c.head_dim * c.hidden_size +
                            3 * c.hidden_size * c.intermediate_size + 2 * c.hidden_size;
  const int64_t total = c.num_layers * per_layer + c.vocab_size * c.hidden_size + c.hidden_size;
  EXPECT_GT(total, 90'000'000);
  EXPECT_LT(total, 140'000'000);
  EXPECT_FALSE(BuiltinModelConfig("huge").ok());
}

}  // namespace
}  // namespace kvserve::engine::testing
