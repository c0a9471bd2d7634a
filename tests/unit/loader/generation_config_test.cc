#include "engine/loader/generation_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/loader/test_files.h"

namespace kvserve::engine {
namespace {

using ::kvserve::engine::testing::TempDir;
using ::kvserve::engine::testing::WriteFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Json = nlohmann::json;

absl::StatusOr<GenerationConfig> Parse(const std::string& text) {
  return ParseGenerationConfig(Json::parse(text), "generation_config.json");
}

// Meta-Llama-3.1-8B-Instruct's generation_config.json as published.
TEST(GenerationConfigTest, Llama31InstructListsEveryEndOfTurnAndItsSampling) {
  auto g = Parse(R"({
    "bos_token_id": 128000, "do_sample": true,
    "eos_token_id": [128001, 128008, 128009],
    "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.42.3"})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(g->eos_token_ids, ElementsAre(128001, 128008, 128009));
  EXPECT_EQ(g->sampling.temperature, 0.6f);
  EXPECT_EQ(g->sampling.top_p, 0.9f);
  EXPECT_FALSE(g->sampling.top_k.has_value());
  EXPECT_FALSE(g->sampling.min_p.has_value());
  EXPECT_FALSE(g->sampling.repetition_penalty.has_value());
}

TEST(GenerationConfigTest, ValuesEqualToTransformersDefaultsAreNotTheCheckpoints) {
  auto g = Parse(R"({"temperature": 1.0, "top_p": 1.0, "top_k": 50,
                     "repetition_penalty": 1.0, "eos_token_id": 2})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->sampling.empty());
  EXPECT_THAT(g->eos_token_ids, ElementsAre(2));
}

TEST(GenerationConfigTest, EveryHonouredSamplingField) {
  auto g = Parse(R"({"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.05,
                     "repetition_penalty": 1.05, "max_length": 4096, "pad_token_id": null})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->sampling.temperature, 0.7f);
  EXPECT_EQ(g->sampling.top_p, 0.8f);
  EXPECT_EQ(g->sampling.top_k, 20);
  EXPECT_EQ(g->sampling.min_p, 0.05f);
  EXPECT_EQ(g->sampling.repetition_penalty, 1.05f);
  EXPECT_THAT(g->eos_token_ids, IsEmpty());
}

TEST(GenerationConfigTest, DuplicateEosIdsAreKeptOnce) {
  auto g = Parse(R"({"eos_token_id": [2, 0, 2]})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(g->eos_token_ids, ElementsAre(2, 0));
}

TEST(GenerationConfigTest, MergeKeepsConfigIdsFirst) {
  EXPECT_THAT(MergeEosTokenIds({2}, {2, 0}), ElementsAre(2, 0));
  EXPECT_THAT(MergeEosTokenIds({128001, 128009}, {128001, 128008, 128009}),
              ElementsAre(128001, 128009, 128008));
  EXPECT_THAT(MergeEosTokenIds({}, {7}), ElementsAre(7));
}

TEST(GenerationConfigTest, WrongTypesNameTheField) {
  struct Case {
    const char* json;
    const char* field;
  };
  for (const Case& c :
       {Case{R"({"eos_token_id": "2"})", "\"eos_token_id\""},
        Case{R"({"eos_token_id": [2, -1]})", "\"eos_token_id\""},
        Case{R"({"eos_token_id": [2.5]})", "\"eos_token_id\""},
        Case{R"({"temperature": "hot"})", "\"temperature\""},
        Case{R"({"top_k": 0.5})", "\"top_k\""}, Case{R"({"top_k": -7})", "\"top_k\""},
        Case{R"({"min_p": [0.1]})", "\"min_p\""}}) {
    auto g = Parse(c.json);
    ASSERT_FALSE(g.ok()) << c.json;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(g.status().message()), HasSubstr("generation_config.json"));
    EXPECT_THAT(std::string(g.status().message()), HasSubstr(c.field)) << c.json;
  }
  EXPECT_FALSE(ParseGenerationConfig(Json::array(), "g.json").ok());
}

TEST(GenerationConfigTest, LoadReadsTheFileOrNothing) {
  TempDir dir;
  auto none = LoadGenerationConfig(dir.path());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(none->eos_token_ids, IsEmpty());
  EXPECT_TRUE(none->sampling.empty());

  WriteFile(dir.File("generation_config.json"), R"({"eos_token_id": [2, 0], "top_k": 40})");
  auto some = LoadGenerationConfig(dir.path());
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_THAT(some->eos_token_ids, ElementsAre(2, 0));
  EXPECT_EQ(some->sampling.top_k, 40);

  WriteFile(dir.File("generation_config.json"), "{not json");
  auto broken = LoadGenerationConfig(dir.path());
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()),
              HasSubstr("generation_config.json: not valid JSON"));
}

}  // namespace
}  // namespace kvserve::engine
