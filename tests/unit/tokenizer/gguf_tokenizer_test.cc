// GgufTokenizerSpec (engine/tokenizer/gguf_tokenizer.h): the tokenizer.json
// spec built from a GGUF vocabulary, on vocabularies small enough to work out
// by hand. The real files are checked against transformers in
// tests/real_models/ (gguf_real_test.cc, test_gguf_tokenizer_real.py).
#include "engine/tokenizer/gguf_tokenizer.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

using ::testing::HasSubstr;
using Merges = std::vector<std::pair<std::string, std::string>>;

GgufVocab SentencePieceVocab(const std::string& architecture) {
  GgufVocab v;
  v.architecture = architecture;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", "a", "b", "c", "ab", "bc", "abc", "  "};
  // "bc" scores above "ab", but comes after it in the file.
  v.scores = {0, 0, 0, -1, -2, -3, -5, -4, -6, -7};
  v.token_type = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1};
  v.bos = 1;
  v.eos = 2;
  v.unk = 0;
  return v;
}

TEST(GgufTokenizerTest, DerivesMergesFromScores) {
  auto spec = GgufTokenizerSpec(SentencePieceVocab("llama"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  // Best score first; a token's own splits with the longer left piece first.
  EXPECT_EQ(spec->merges, (Merges{{"b", "c"}, {"a", "b"}, {"ab", "c"}, {"a", "bc"}}));
  EXPECT_EQ(spec->prefix_ids, std::vector<int32_t>{1});  // llama adds BOS by default
  EXPECT_TRUE(spec->suffix_ids.empty());
  ASSERT_EQ(spec->added_tokens.size(), 3u);  // UNKNOWN and CONTROL are special
  EXPECT_EQ(spec->added_tokens[0].content, "<unk>");
  EXPECT_TRUE(spec->added_tokens[2].special);
  EXPECT_TRUE(spec->metaspace.has_value());
}

TEST(GgufTokenizerTest, GemmaRanksMergesByPositionAndRespellsSpaces) {
  auto spec = GgufTokenizerSpec(SentencePieceVocab("gemma3"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->merges, (Merges{{"a", "b"}, {"b", "c"}, {"ab", "c"}, {"a", "bc"}}));
  EXPECT_EQ(spec->vocab.at("\u2581\u2581"), 9);
  EXPECT_FALSE(spec->vocab.contains("  "));
  EXPECT_FALSE(spec->metaspace.has_value());
  EXPECT_EQ(spec->split_merged_with_previous, " ");
}

TEST(GgufTokenizerTest, ByteLevelVocabularyKeepsTheFileMerges) {
  GgufVocab v;
  v.architecture = "qwen2";
  v.model = "gpt2";
  v.pre = "qwen2";
  v.tokens = {"<|endoftext|>", "h", "i", "hi", "\u0120", " raw"};
  v.token_type = {3, 1, 1, 1, 1, 4};
  v.merges = {"h i"};
  v.eos = 0;
  auto spec = GgufTokenizerSpec(v);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->merges, (Merges{{"h", "i"}}));
  // A token outside the byte-level alphabet is spelled byte by byte.
  EXPECT_EQ(spec->vocab.at("\u0120raw"), 5);
  EXPECT_TRUE(spec->prefix_ids.empty());  // gpt2 adds no BOS by default
  ASSERT_EQ(spec->splits.size(), 1u);     // qwen2's split regex, then ByteLevel
  EXPECT_FALSE(spec->byte_level_regex);
  // " raw" is USER_DEFINED but the vocabulary spells it "Ġraw": not added.
  ASSERT_EQ(spec->added_tokens.size(), 1u);
  EXPECT_EQ(spec->added_tokens[0].content, "<|endoftext|>");
}

TEST(GgufTokenizerTest, RefusesWhatItCannotBuildByKey) {
  GgufVocab v = SentencePieceVocab("llama");
  v.model = "bert";
  EXPECT_THAT(std::string(GgufTokenizerSpec(v).status().message()),
              HasSubstr("tokenizer.ggml.model \"bert\""));
  v = SentencePieceVocab("llama");
  v.scores.pop_back();
  EXPECT_THAT(std::string(GgufTokenizerSpec(v).status().message()),
              HasSubstr("tokenizer.ggml.scores has 9 entries for 10 tokens"));
  v = SentencePieceVocab("llama");
  v.bos = 10;
  EXPECT_THAT(std::string(GgufTokenizerSpec(v).status().message()),
              HasSubstr("tokenizer.ggml.bos_token_id = 10"));
  v = SentencePieceVocab("llama");
  v.merges = {"a b c"};
  EXPECT_THAT(std::string(GgufTokenizerSpec(v).status().message()),
              HasSubstr("tokenizer.ggml.merges[0]"));
  v = SentencePieceVocab("llama");
  v.model = "gpt2";
  EXPECT_THAT(std::string(GgufTokenizerSpec(v).status().message()),
              HasSubstr("tokenizer.ggml.merges is missing"));
}

}  // namespace
}  // namespace kvserve::engine
